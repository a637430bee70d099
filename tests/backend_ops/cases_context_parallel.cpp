// backend_ops cases: context parallelism's ops (backend/ops.h) — the K/V
// column copy both ways, the block attention of the K/V ring (diagonal and
// off-diagonal blocks, written and merged by log-sum-exp, forward and
// backward; one query row against a KV cache, as decoding calls it), the row
// gather of the all-to-all and RoPE at given positions.
#include <string>
#include <utility>

#include "cases.h"

namespace tripod::testing {

using backend::AttentionBlock;
using backend::Backend;

void add_context_parallel_cases(std::vector<OpCase>& v) {
  // K/V copy: grouped-query (4 query heads, 2 K/V heads of 24); into a qkv
  // the Q columns keep their values (Acc).
  {
    const int64_t B = 2, T = 9, HS = 24;
    const int nh = 4, g = 2;
    const int64_t W = (nh + 2 * g) * HS, KV = 2 * g * HS;
    v.push_back({"attention_kv_copy_from_qkv", {out("kv", {B, T, KV}), in("qkv", {B, T, W})},
                 [=](Backend& be, Args& t) { be.attention_kv_copy(t[0], t[1], nh, g); }});
    v.push_back({"attention_kv_copy_to_qkv", {acc("qkv", {B, T, W}), in("kv", {B, T, KV})},
                 [=](Backend& be, Args& t) { be.attention_kv_copy(t[0], t[1], nh, g); }});
  }

  // The row gather of the a2a exchange: head rows of 24 (whole 4-byte
  // words in every dtype) and 7 (2-byte words under bf16/f16), rows read
  // more than once and some not at all.
  for (int64_t hs : {24, 7}) {
    const int64_t N = 37, R = 53;
    v.push_back({"gather_rows_hs" + std::to_string(hs), {out("out", {R, hs}), in("inp", {N, hs}), ids("index", {R}, 0, N)},
                 [=](Backend& be, Args& t) { be.gather_rows(t[0], t[1], t[2]); }});
  }

  // Block attention. qkv (B, Tq, ...) against kv (B, Tk, ...) with Tk != Tq
  // (the windows index each tensor on its own); out and lse are Acc so the
  // rows outside the query window must keep their values, and a merge
  // (accumulate) starts from random partial results. Head sizes: 32 and 64
  // with grouped-query attention, 128 multi-head, and 40 (lanes past HS idle).
  struct Bk { const char* tag; int64_t b, tq, tk; int nh, g, hs; AttentionBlock blk; bool accumulate; };
  for (Bk s : {Bk{"_diag_hs32", 2, 24, 20, 4, 2, 32, {4, 8, 6, 8, true}, false},
               Bk{"_diag_merge_hs64", 1, 21, 21, 4, 2, 64, {5, 16, 3, 16, true}, true},
               Bk{"_off_hs64", 2, 17, 23, 2, 2, 64, {1, 15, 2, 19, false}, false},
               Bk{"_off_merge_hs128", 1, 12, 16, 2, 1, 128, {2, 9, 0, 16, false}, true},
               Bk{"_off_merge_hs40", 2, 10, 11, 3, 3, 40, {0, 10, 1, 7, false}, true},
               // Decoding with a KV cache (generate/inference_context.h): one query row
               // against the first rows of a longer cache, grouped-query and multi-head.
               Bk{"_decode_hs64", 1, 1, 40, 8, 2, 64, {0, 1, 0, 29, false}, false},
               Bk{"_decode_hs128", 1, 1, 300, 4, 4, 128, {0, 1, 0, 300, false}, false},
               // Windows of 64 rows and more: on the GPU in bf16/f16 cuDNN's fused attention
               // runs them (NOTE [Block attention kernels]): a diagonal block written in place,
               // an off-diagonal one merged, and a query window starting off a 4-row boundary
               // (the forward through scratch, the backward on the kernels).
               Bk{"_cudnn_diag_hs64", 2, 160, 144, 4, 2, 64, {32, 64, 16, 64, true}, false},
               Bk{"_cudnn_off_merge_hs128", 1, 192, 128, 4, 2, 128, {64, 128, 0, 96, false}, true},
               Bk{"_cudnn_off_hs128", 1, 192, 128, 4, 4, 128, {64, 128, 8, 96, false}, false},
               Bk{"_cudnn_diag_start2_hs64", 1, 70, 70, 2, 1, 64, {2, 64, 2, 64, true}, false}}) {
    const int64_t B = s.b, Tq = s.tq, Tk = s.tk, HS = s.hs;
    const int nh = s.nh, g = s.g;
    const int64_t W = (nh + 2 * g) * HS, KV = 2 * g * HS, C = nh * HS;
    const AttentionBlock blk = s.blk;
    const bool accumulate = s.accumulate;
    v.push_back({std::string("attention_block_forward") + s.tag,
                 {acc("out", {B, Tq, C}), acc("lse", {B, nh, Tq}, Kind::F32), in("qkv", {B, Tq, W}),
                  in("kv", {B, Tk, KV})},
                 [=](Backend& be, Args& t) {
                   be.attention_block_forward(t[0], t[1], t[2], t[3], nh, g, blk, accumulate);
                 }});
    // Backward from the block's own (out, lse) (the reference derives them),
    // adding into random dqkv and dkv.
    if (accumulate) continue;
    v.push_back({std::string("attention_block_backward") + s.tag,
                 {acc("dqkv", {B, Tq, W}), acc("dkv", {B, Tk, KV}), in("dout", {B, Tq, C}), in("qkv", {B, Tq, W}),
                  in("kv", {B, Tk, KV}), in("out", {B, Tq, C}), in("lse", {B, nh, Tq}, Kind::F32)},
                 [=](Backend& be, Args& t) {
                   be.attention_block_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], nh, g, blk);
                 },
                 [=](Backend& be, Args& t) { be.attention_block_forward(t[5], t[6], t[3], t[4], nh, g, blk, false); }});
  }
  // The backward of a block whose (out, lse) are the merge over two blocks
  // (the ring's case: p over one block sums to less than 1).
  // Half-windows of 8 rows (the kernels) and of 64 (cuDNN on the GPU).
  for (const int64_t half : {8, 64}) {
    const int64_t B = 2, Tq = 2 * half, Tk = 2 * half, HS = 64;
    const int nh = 4, g = 2;
    const int64_t W = (nh + 2 * g) * HS, KV = 2 * g * HS, C = nh * HS;
    const AttentionBlock diag{half, half, half, half, true}, past{half, half, 0, half, false};
    const std::string sz = half == 8 ? "" : "_cudnn";
    for (const auto& [tag, b] : {std::pair<const char*, AttentionBlock>{"_ring_diag", diag}, {"_ring_past", past}}) {
      const AttentionBlock blk = b;
      v.push_back({std::string("attention_block_backward") + tag + sz,
                   {acc("dqkv", {B, Tq, W}), acc("dkv", {B, Tk, KV}), in("dout", {B, Tq, C}),
                    in("qkv", {B, Tq, W}), in("kv", {B, Tk, KV}), in("out", {B, Tq, C}),
                    in("lse", {B, nh, Tq}, Kind::F32)},
                   [=](Backend& be, Args& t) {
                     be.attention_block_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], nh, g, blk);
                   },
                   [=](Backend& be, Args& t) {
                     be.attention_block_forward(t[5], t[6], t[3], t[4], nh, g, diag, false);
                     be.attention_block_forward(t[5], t[6], t[3], t[4], nh, g, past, true);
                   }});
    }
  }

  // RoPE at positions (a context-parallel rank's two chunks are not at
  // 0..T-1): positions up to 4096, grouped-query heads, rot_dim < HS, and
  // an odd half-rotation (element loop of the rotation kernel).
  struct Rp { const char* tag; int64_t t; int nh, g, hs; int64_t rot; };
  for (Rp s : {Rp{"", 12, 4, 2, 32, 16}, Rp{"_odd", 7, 2, 1, 20, 10}}) {
    const int64_t B = 2, T = s.t, W = int64_t(s.nh + 2 * s.g) * s.hs, rot = s.rot;
    const int nh = s.nh, g = s.g;
    v.push_back({std::string("rope_forward_positions") + s.tag, {acc("qkv", {B, T, W}), ids("positions", {T}, 0, 4096)},
                 [=](Backend& be, Args& t) { be.rope_forward(t[0], nh, g, rot, 10000.f, &t[1]); }});
    v.push_back({std::string("rope_backward_positions") + s.tag,
                 {acc("dqkv", {B, T, W}), ids("positions", {T}, 0, 4096)},
                 [=](Backend& be, Args& t) { be.rope_backward(t[0], nh, g, rot, 10000.f, &t[1]); }});
  }
}

}  // namespace tripod::testing
