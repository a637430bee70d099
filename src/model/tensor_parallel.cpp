// Implementation of model/tensor_parallel.h.
#include "model/tensor_parallel.h"

#include "base/error.h"

namespace tripod::model {

using namespace parallel;

const Tensor& ColumnParallelLinear::input(const Tensor& x, Tensor& full_buf) const {
  if (!tp_.sequence_parallel) return copy_to_tensor_model_parallel_region(x);
  gather_from_sequence_parallel_region(tp_.group, full_buf, x);
  return full_buf;
}

const Tensor& ColumnParallelLinear::forward(backend::Backend& be, Tensor& y, const Tensor& x,
                                            Tensor& full_buf) const {
  const Tensor& x_full = input(x, full_buf);
  if (fp8_)  // x cast after the gather: its amax is the whole tensor's on every rank
    fp8_->forward(y, x_full, false, bias_ ? &bias_->compute : nullptr);
  else
    be.matmul_forward(y, x_full, weight_->compute, bias_ ? &bias_->compute : nullptr);
  return x_full;
}

const Tensor& ColumnParallelLinear::forward_gelu(backend::Backend& be, Tensor& y, Tensor& pre, const Tensor& x,
                                                 Tensor& full_buf) const {
  const Tensor& x_full = input(x, full_buf);
  if (fp8_) {
    fp8_->forward(pre, x_full, false, bias_ ? &bias_->compute : nullptr);
    be.gelu_forward(y, pre);
  } else {
    be.matmul_forward_gelu(y, pre, x_full, weight_->compute, bias_ ? &bias_->compute : nullptr);
  }
  return x_full;
}

const Tensor& ColumnParallelLinear::backward(backend::Backend& be, const Tensor& dy, const Tensor& x_full,
                                             Tensor& dfull_buf, Tensor& dshard_buf) const {
  if (fp8_) {
    backward_input(be, dy, dfull_buf, dshard_buf);  // reduces d x before the weight gradient; same values
    backward_weight(be, dy, x_full);
    return tp_.sequence_parallel ? dshard_buf : dfull_buf;
  }
  be.matmul_backward(&dfull_buf, &weight_->grad, bias_ ? &bias_->grad : nullptr, dy, x_full, weight_->compute);
  return reduce_input_grad(dfull_buf, dshard_buf);
}

const Tensor& ColumnParallelLinear::backward_input(backend::Backend& be, const Tensor& dy, Tensor& dfull_buf,
                                                   Tensor& dshard_buf) const {
  if (fp8_) {  // dy (N, OC_tp) is this rank's shard of the output gradient
    fp8_->quantize_grad(dy, tp_.active());
    fp8_->dgrad(dfull_buf);
    return reduce_input_grad(dfull_buf, dshard_buf);
  }
  // d x = dy W: matmul_backward reads its inp only for dweight, so the
  // output buffer (the shape of x_full) stands in for it.
  be.matmul_backward(&dfull_buf, nullptr, nullptr, dy, dfull_buf, weight_->compute);
  return reduce_input_grad(dfull_buf, dshard_buf);
}

const Tensor& ColumnParallelLinear::backward_input_swiglu(const Tensor& fc1, const Tensor& dact, Tensor& dfull_buf,
                                                          Tensor& dshard_buf) const {
  TRIPOD_CHECK(fp8_ && !bias_, "ColumnParallelLinear::backward_input_swiglu needs FP8 GEMMs and no bias");
  fp8_->quantize_grad_swiglu(fc1, dact);
  fp8_->dgrad(dfull_buf);
  return reduce_input_grad(dfull_buf, dshard_buf);
}

void ColumnParallelLinear::backward_weight(backend::Backend& be, const Tensor& dy, const Tensor& x_full) const {
  if (fp8_) {  // dy's FP8 codes from backward_input
    fp8_->wgrad(weight_->grad, bias_ ? &bias_->grad : nullptr, dy, x_full, false);
    return;
  }
  be.matmul_backward(nullptr, &weight_->grad, bias_ ? &bias_->grad : nullptr, dy, x_full, weight_->compute);
}

const Tensor& ColumnParallelLinear::reduce_input_grad(Tensor& dfull_buf, Tensor& dshard_buf) const {
  if (tp_.sequence_parallel) {
    gather_from_sequence_parallel_region_backward(tp_.group, dshard_buf, dfull_buf);
    return dshard_buf;
  }
  copy_to_tensor_model_parallel_region_backward(tp_.group, dfull_buf);
  return dfull_buf;
}

Tensor& RowParallelLinear::forward(backend::Backend& be, const Tensor& x, Tensor& partial_buf,
                                   Tensor& shard_buf) const {
  return forward_with(
      be,
      [&](const Tensor* b) {
        if (fp8_)  // x (N, IC_tp) is this rank's shard of the input
          fp8_->forward(partial_buf, x, tp_.active(), b);
        else
          be.matmul_forward(partial_buf, x, weight_->compute, b);
      },
      partial_buf, shard_buf);
}

Tensor& RowParallelLinear::forward_swiglu(backend::Backend& be, const Tensor& fc1, Tensor& partial_buf,
                                          Tensor& shard_buf) const {
  TRIPOD_CHECK(fp8_, "RowParallelLinear::forward_swiglu without FP8 GEMMs");
  return forward_with(be, [&](const Tensor* b) { fp8_->forward_swiglu(partial_buf, fc1, b); }, partial_buf,
                      shard_buf);
}

Tensor& RowParallelLinear::forward_with(backend::Backend& be, const std::function<void(const Tensor*)>& matmul,
                                        Tensor& partial_buf, Tensor& shard_buf) const {
  // Unsplit (tp size 1): the bias rides in the matmul's epilogue. Split, it
  // must wait for the sum of the partial products.
  const Tensor* bias = bias_ ? &bias_->compute : nullptr;  // null: --disable-bias-linear
  if (!tp_.active()) {
    matmul(bias);
    return partial_buf;
  }
  matmul(nullptr);
  Tensor* out = &partial_buf;
  if (tp_.sequence_parallel) {
    reduce_scatter_to_sequence_parallel_region(tp_.group, shard_buf, partial_buf);
    out = &shard_buf;
  } else {
    reduce_from_tensor_model_parallel_region(tp_.group, partial_buf);
  }
  if (bias) be.add_bias(*out, *bias);
  return *out;
}

const Tensor& RowParallelLinear::full_output_grad(const Tensor& dy, Tensor& full_buf) const {
  if (!tp_.sequence_parallel) return reduce_from_tensor_model_parallel_region_backward(dy);
  reduce_scatter_to_sequence_parallel_region_backward(tp_.group, full_buf, dy);
  return full_buf;
}

void RowParallelLinear::fp8_backward(Tensor& dx, const Tensor& dy_full, const Tensor& x) const {
  fp8_->quantize_grad(dy_full, false);  // the full output gradient on every rank
  fp8_->dgrad(dx);
  fp8_->wgrad(weight_->grad, bias_ ? &bias_->grad : nullptr, dy_full, x, tp_.active());
}

void RowParallelLinear::backward(backend::Backend& be, Tensor& dx, const Tensor& dy, const Tensor& x,
                                 Tensor& full_buf) const {
  if (fp8_) {
    fp8_backward(dx, full_output_grad(dy, full_buf), x);
    return;
  }
  be.matmul_backward(&dx, &weight_->grad, bias_ ? &bias_->grad : nullptr, full_output_grad(dy, full_buf), x,
                     weight_->compute);
}

void RowParallelLinear::backward_dgelu(backend::Backend& be, Tensor& dpre, const Tensor& dy, const Tensor& x,
                                       const Tensor& pre, Tensor& full_buf) const {
  if (fp8_) {  // the GELU backward unfused, after the FP8 dgrad
    fp8_backward(dpre, full_output_grad(dy, full_buf), x);
    be.gelu_backward(dpre, pre, dpre);
    return;
  }
  be.matmul_backward_dgelu(dpre, &weight_->grad, bias_ ? &bias_->grad : nullptr, full_output_grad(dy, full_buf),
                           x, weight_->compute, pre);
}

void VocabParallelEmbedding::forward(backend::Backend& be, Tensor& out, const Tensor& tokens,
                                     Tensor& full_buf, const Tensor* position_rows) const {
  const int64_t B = tokens.size(0), T = tokens.size(1), C = word_->shape[1];
  // No position embedding under --position-embedding-type rope|none.
  const Tensor* position_here =
      (tp_.rank() == 0 && position_) ? (position_rows ? position_rows : &position_->compute) : nullptr;
  if (!tp_.active()) {
    Tensor x = out.view({B, T, C});
    be.embedding_forward(x, tokens, word_->compute, position_here, vocab_start());
    return;
  }
  Tensor x = full_buf.view({B, T, C});
  be.embedding_forward(x, tokens, word_->compute, position_here, vocab_start());
  if (tp_.sequence_parallel) {
    reduce_scatter_to_sequence_parallel_region(tp_.group, out, full_buf);
  } else {
    reduce_from_tensor_model_parallel_region(tp_.group, full_buf);
    be.copy(out, full_buf);
  }
}

void VocabParallelEmbedding::backward(backend::Backend& be, const Tensor& dout, const Tensor& tokens,
                                      Tensor& full_buf, Tensor* dposition_rows) const {
  const int64_t B = tokens.size(0), T = tokens.size(1), C = word_->shape[1];
  const Tensor* dfull = &reduce_from_tensor_model_parallel_region_backward(dout);
  if (tp_.sequence_parallel) {
    reduce_scatter_to_sequence_parallel_region_backward(tp_.group, full_buf, dout);
    dfull = &full_buf;
  }
  Tensor d = dfull->view({B, T, C});
  Tensor* dpos = position_ ? (dposition_rows ? dposition_rows : &position_->grad) : nullptr;
  be.embedding_backward(&word_->grad, dpos, d, tokens, vocab_start());
}

void VocabParallelCrossEntropy::forward(backend::Backend& be, Tensor& losses, const Tensor& logits,
                                        const Tensor& targets, int64_t vocab_start, Tensor& row_max,
                                        Tensor& sums) const {
  be.ce_row_max(row_max, logits);
  tensor_model_parallel_all_reduce(tp_.group, row_max, comm::ReduceOp::Max);
  be.ce_row_sums(sums, logits, row_max, targets, vocab_start);
  tensor_model_parallel_all_reduce(tp_.group, sums);
  be.ce_loss(losses, sums, row_max);
}

void VocabParallelCrossEntropy::backward(backend::Backend& be, Tensor& dlogits, const Tensor& logits,
                                         const Tensor& targets, int64_t vocab_start, const Tensor& row_max,
                                         const Tensor& sums, float dloss) const {
  be.ce_backward(dlogits, logits, row_max, sums, targets, vocab_start, dloss);
}

void VocabParallelCrossEntropy::forward_backward(backend::Backend& be, Tensor& losses, Tensor* dlogits,
                                                 const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                                                 Tensor& row_max, Tensor& sums, float dloss) const {
  if (!tp_.active()) {
    be.cross_entropy_fused(losses, dlogits, logits, targets, dloss);
    return;
  }
  forward(be, losses, logits, targets, vocab_start, row_max, sums);
  if (dlogits) backward(be, *dlogits, logits, targets, vocab_start, row_max, sums, dloss);
}

}  // namespace tripod::model
