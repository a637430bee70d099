// tripod's own activation formula (plan/memory_model.h,
// tripod_layer_activation_bytes) against what the model really allocates:
// model::MicroBatchActs::bytes() for stages with and without the embedding
// and the loss head, at tp 1 and tp 2 with and without sequence parallel.
// Also the plan's parameters per stage against config::GptConfig's count
// and the model's buffers, and all of it for the Llama family (GQA, SwiGLU,
// RMSNorm, untied, no bias).
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "comm/local_communicator.h"
#include "model/gpt_model.h"
#include "plan/memory_model.h"

namespace tripod::plan {
namespace {

// make_acts() only needs the tp group's size: a group that reports `n`
// members and is never used for communication here.
class SizedGroup : public comm::LocalCommunicator {
 public:
  explicit SizedGroup(int n) : LocalCommunicator("tp"), n_(n) {}
  int size() const override { return n_; }

 private:
  int n_;
};

struct Case {
  int tp;
  bool sp, pre, post;
  int64_t B;
  DType dtype = DType::F32;
  model::Recompute rc = model::Recompute::None;
};

TEST(PlanActivations, TripodFormulaMatchesMicroBatchActs) {
  config::GptConfig cfg;
  cfg.num_layers = 3, cfg.hidden_size = 64, cfg.num_attention_heads = 4, cfg.ffn_hidden_size = 192;
  cfg.seq_length = 32, cfg.vocab_size = 100;
  cfg.finalize();
  const GptConfig& m = cfg;
  auto be = backend::make_cpu_backend();
  for (const Case& c : {Case{1, false, true, true, 2}, Case{1, false, false, true, 3}, Case{1, false, true, false, 1},
                        Case{2, false, true, true, 2}, Case{2, true, true, true, 2}, Case{2, true, false, false, 4},
                        Case{4, true, false, true, 1},
                        Case{1, false, true, true, 2, DType::BF16},
                        Case{2, true, true, true, 2, DType::BF16, model::Recompute::Selective},
                        Case{2, false, false, true, 2, DType::F32, model::Recompute::Selective},
                        Case{2, true, true, false, 3, DType::BF16, model::Recompute::Full},
                        Case{1, false, true, true, 1, DType::F32, model::Recompute::Full}}) {
    SCOPED_TRACE(testing::Message() << "tp " << c.tp << " sp " << c.sp << " pre " << c.pre << " post " << c.post
                                    << " B " << c.B << " act bytes " << dtype_size(c.dtype) << " recompute "
                                    << int(c.rc));
    SizedGroup group(c.tp);
    model::StageConfig st;
    st.first_layer = 0, st.num_local_layers = cfg.num_layers, st.pre_process = c.pre, st.post_process = c.post;
    st.tp = c.tp > 1 ? &group : nullptr, st.sequence_parallel = c.sp;
    st.compute_dtype = c.dtype, st.recompute = c.rc;
    const int act = int(dtype_size(c.dtype));
    model::GptModel model(cfg, st, *be);
    const model::MicroBatchActs acts = model.make_acts(c.B, cfg.seq_length);
    const double want = 3 * tripod_layer_activation_bytes(m, c.B, c.tp, c.sp, act, c.rc) +
                        tripod_stage_extra_activation_bytes(m, c.B, c.tp, c.sp, c.post, act);
    EXPECT_DOUBLE_EQ(double(acts.bytes()), want);
  }
}

// Under --fp8-format the plan adds Fp8Bytes' per-micro-batch terms to the
// bf16 formula (the kept FP8 input transposes and their scales, the FP8
// attention's codes; less the SwiGLU activation and the bf16 qkv and
// attention output the FP8 layer does not keep): against what the model
// allocates, for each recipe, with and without --no-fp8-wgrad (no
// transposes, the SwiGLU activation and the bf16 attention tensors kept),
// a GPT-2-style and a Llama-style layer.
TEST(PlanActivations, Fp8TermsMatchMicroBatchActs) {
  auto be = backend::make_cpu_backend();
  for (bool llama : {false, true}) {
    config::GptConfig cfg;
    cfg.num_layers = 2, cfg.hidden_size = 128, cfg.num_attention_heads = 4, cfg.ffn_hidden_size = 256;
    cfg.seq_length = 64, cfg.vocab_size = 100;
    if (llama) {
      cfg.swiglu = true, cfg.add_bias_linear = false;
      cfg.normalization = config::GptConfig::Norm::RMSNorm;
      cfg.position_embedding_type = config::GptConfig::Position::Rope;
    }
    cfg.finalize();
    for (config::Fp8Recipe recipe :
         {config::Fp8Recipe::Delayed, config::Fp8Recipe::Tensorwise, config::Fp8Recipe::Blockwise})
      for (bool hp : {false, true})
        for (bool dpa : {false, true})
          for (model::Recompute rc : {model::Recompute::None, model::Recompute::Selective}) {
            if (dpa && recipe != config::Fp8Recipe::Delayed) continue;
            SCOPED_TRACE(testing::Message() << "llama " << llama << " recipe " << config::to_string(recipe)
                                            << " no-fp8-wgrad " << hp << " fp8 attention " << dpa << " recompute "
                                            << int(rc));
            config::GptConfig m = cfg;
            m.fp8.format = config::Fp8Format::Hybrid;
            m.fp8.recipe = recipe;
            m.fp8.high_precision_wgrad = hp;
            m.fp8.dot_product_attention = dpa;
            model::StageConfig st;
            st.first_layer = 0, st.num_local_layers = m.num_layers, st.pre_process = false, st.post_process = false;
            st.compute_dtype = DType::BF16, st.recompute = rc;
            model::GptModel model(m, st, *be);
            const model::MicroBatchActs acts = model.make_acts(2, m.seq_length);
            const Fp8Bytes f = tripod_fp8_bytes(m, 2, 1, rc, 0, m.num_layers, 1, 2);
            if (hp) {
              EXPECT_DOUBLE_EQ(f.swiglu_act_saved, 0.0);
              EXPECT_DOUBLE_EQ(f.attention_act_saved, 0.0);
            }
            // LayerActs::bytes() leaves out the 16 f32 slots (64 bytes a
            // layer) that the per-tensor recipes' kept scale_invs share; the
            // plan counts them (they are allocated).
            const double slots = !hp && recipe != config::Fp8Recipe::Blockwise ? 2 * 64.0 : 0.0;
            const double want = 2 * tripod_layer_activation_bytes(m, 2, 1, false, 2, rc) +
                                tripod_stage_extra_activation_bytes(m, 2, 1, false, false, 2) + f.per_microbatch -
                                f.swiglu_act_saved - f.attention_act_saved - slots;
            EXPECT_DOUBLE_EQ(double(acts.bytes()), want);
          }
  }
}

TEST(PlanActivations, HandCountOneLayer) {
  // B 2, T 32, C 64, NH 4, F 256, tp 1 (fp32 floats):
  // res1, out: 2 x 64 x 64; means/rstds: 4 x 64; qkv 64 x 192; att 64 x 64;
  // lse 2 x 4 x 32; fc1, gelu: 2 x 64 x 256  -> 8192 + 256 + 12288 + 4096 + 256 + 32768 = 57856 floats
  // (the LayerNorm outputs are workspace).
  GptConfig m;
  m.num_layers = 1, m.hidden_size = 64, m.num_attention_heads = 4, m.seq_length = 32, m.vocab_size = 100;
  m.finalize();
  EXPECT_DOUBLE_EQ(tripod_layer_activation_bytes(m, 2, 1, false), 4.0 * 57856);
  // bf16 activations, f32 statistics (256 + 256 floats of means/rstd and lse):
  EXPECT_DOUBLE_EQ(tripod_layer_activation_bytes(m, 2, 1, false, 2), 2.0 * (57856 - 512) + 4.0 * 512);
  // selective: no att (64 x 64) and no lse (256); full: only out (64 x 64).
  EXPECT_DOUBLE_EQ(tripod_layer_activation_bytes(m, 2, 1, false, 4, Recompute::Selective),
                   4.0 * (57856 - 4096 - 256));
  EXPECT_DOUBLE_EQ(tripod_layer_activation_bytes(m, 2, 1, false, 2, Recompute::Full), 2.0 * 4096);
}

TEST(PlanActivations, ParameterCountMatchesModel) {
  config::GptConfig cfg;
  cfg.num_layers = 48, cfg.hidden_size = 1600, cfg.num_attention_heads = 25, cfg.seq_length = 1024;
  cfg.vocab_size = 50257;
  cfg.finalize();
  // One stage, one tp rank: the whole model, as config counts it.
  EXPECT_EQ(params_on_stage(cfg, 1, 1, 0), cfg.num_parameters(cfg.padded_vocab_size(1)));
  // tp 2, pp 1: the model less half of what tp splits.
  int64_t split = 0;
  for (int64_t i = 0; i < cfg.num_layers; ++i) split += cfg.layer_spec(i).tp_sharded_parameters() / 2;
  EXPECT_EQ(params_on_stage(cfg, 2, 1, 0),
            cfg.num_parameters(cfg.padded_vocab_size(2)) - split - cfg.padded_vocab_size(2) * 1600 / 2);
}

TEST(PlanActivations, LlamaFormulasMatchTheModel) {
  config::GptConfig cfg;
  cfg.num_layers = 4, cfg.hidden_size = 64, cfg.num_attention_heads = 8, cfg.ffn_hidden_size = 96;
  cfg.seq_length = 32, cfg.vocab_size = 100;
  cfg.group_query_attention = true, cfg.num_query_groups = 2, cfg.swiglu = true;
  cfg.position_embedding_type = config::GptConfig::Position::Rope;
  cfg.normalization = config::GptConfig::Norm::RMSNorm;
  cfg.untie_embeddings_and_output_weights = true, cfg.add_bias_linear = false;
  cfg.finalize();
  const GptConfig& m = cfg;
  // Hand count at vocab 100: per layer 2 x 64 (norms) + 96 x 64 (qkv: (8 + 2 x 2) x 8 rows) + 64 x 64
  // + 192 x 64 (fc1) + 64 x 96 (fc2) = 128 + 6144 + 4096 + 12288 + 6144 = 28800; x 4 = 115200;
  // + 2 x 100 x 64 (embedding, output layer) + 64 (final norm) = 128064.
  EXPECT_EQ(cfg.num_parameters(100), 128064);
  // FLOPs: 6 x (N less the untied input embedding) + 6 L T C.
  EXPECT_DOUBLE_EQ(cfg.flops_per_token(), 6.0 * (128064 - 6400) + 6.0 * 4 * 32 * 64);
  auto be = backend::make_cpu_backend();
  for (const Case& c : {Case{1, false, true, true, 2}, Case{2, false, true, true, 2}, Case{2, true, false, true, 2},
                        Case{2, true, true, false, 3, DType::BF16},
                        Case{2, true, true, true, 2, DType::BF16, model::Recompute::Selective},
                        Case{1, false, true, true, 1, DType::F32, model::Recompute::Full}}) {
    SCOPED_TRACE(testing::Message() << "tp " << c.tp << " sp " << c.sp << " pre " << c.pre << " post " << c.post);
    SizedGroup group(c.tp);
    model::StageConfig st;
    st.pre_process = c.pre, st.post_process = c.post;
    st.tp = c.tp > 1 ? &group : nullptr, st.sequence_parallel = c.sp;
    st.compute_dtype = c.dtype, st.recompute = c.rc;
    const int act = int(dtype_size(c.dtype));
    model::GptModel model(cfg, st, *be);
    const model::MicroBatchActs acts = model.make_acts(c.B, cfg.seq_length);
    EXPECT_DOUBLE_EQ(double(acts.bytes()), 4 * tripod_layer_activation_bytes(m, c.B, c.tp, c.sp, act, c.rc) +
                                               tripod_stage_extra_activation_bytes(m, c.B, c.tp, c.sp, c.post, act));
    if (c.pre && c.post) EXPECT_EQ(model.params().numel(), params_on_stage(m, c.tp, 1, 0));
  }
  // Two stages: the first holds the embedding, the last the output layer (no tied copy).
  for (int stage : {0, 1}) {
    model::StageConfig st;
    st.first_layer = 2 * stage, st.num_local_layers = 2, st.pre_process = stage == 0, st.post_process = stage == 1;
    model::GptModel model(cfg, st, *be);
    EXPECT_EQ(model.params().numel(), params_on_stage(m, 1, 2, stage)) << "stage " << stage;
  }
}

}  // namespace
}  // namespace tripod::plan
