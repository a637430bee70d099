// A small committed checkpoint for the ckpt_metadata fuzz target and its
// seeds, written by the real save path (prepare_save, write_rank_file at tp 2,
// commit_save), and the checksum rule of metadata.json.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tripod::fuzz {

// Writes the checkpoint (iteration 1) into dir; returns dir.
std::string make_checkpoint_fixture(const std::string& dir);
// The metadata text with "crc32" set as commit_save sets it.
std::string with_metadata_checksum(nlohmann::json meta);

}  // namespace tripod::fuzz
