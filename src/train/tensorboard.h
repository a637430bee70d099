// TensorBoard event files (--tensorboard-dir): the same scalars as the JSONL
// metrics file (train/metrics.h), readable by TensorBoard without any
// TensorFlow or protobuf dependency.
//
// File: <dir>/events.out.tfevents.<unix-time>.<hostname>, a TFRecord stream:
//   uint64 length (LE) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
//   mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8, crc32c = CRC-32 Castagnoli (reflected, 0x82F63B78).
// data is a serialized tensorflow.Event (core/util/event.proto), encoded by hand:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }      (core/framework/summary.proto)
//   Value   { string tag = 1; float simple_value = 2; }
// The first record carries file_version "brain.Event:2"; every scalar is one
// Event with one Value, as TensorFlow's own writers emit them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace tripod::train {

struct IterationMetrics;

// CRC-32C (Castagnoli) of bytes; crc32c("123456789") = 0xE3069283.
uint32_t crc32c(const void* data, size_t n);
// TFRecord's masked CRC (the stored form).
uint32_t masked_crc32c(const void* data, size_t n);
// One TFRecord frame around payload.
std::string tfrecord_frame(std::string_view payload);
// Serialized Event protos.
std::string encode_file_version_event(double wall_time, std::string_view version);
std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, float value);

class TensorBoardWriter {
 public:
  // Creates dir (and parents) and a fresh event file in it; empty dir: disabled.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  bool enabled() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }
  void add_scalar(std::string_view tag, int64_t step, double value);
  void flush();

  // Megatron's tag names for one logged iteration / one evaluation; both flush.
  void write_train(const IterationMetrics& m);
  void write_eval(int64_t iteration, double val_loss);

 private:
  void write_record(const std::string& payload);
  FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace tripod::train
