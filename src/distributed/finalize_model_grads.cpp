// Implementation of distributed/finalize_model_grads.h.
#include "distributed/finalize_model_grads.h"

namespace tripod::distributed {
void finalize_model_grads(DistributedDataParallel& ddp, const parallel::ProcessGroups& groups) {
  // With overlap, or ZeRO-2/-3 (every micro-batch), the backward hook did this.
  if (!ddp.overlap_grad_reduce() && !ddp.config().shards_grads())
    for (int c = 0; c < ddp.num_chunks(); ++c) ddp.model(c).reduce_sequence_parallel_grads();
  if (groups.layout.pp > 1 && groups.embd) {
    for (int c = 0; c < ddp.num_chunks(); ++c) {
      model::GptModel& m = ddp.model(c);
      const auto& st = m.stage();
      // An untied output layer (--untie-embeddings-and-output-weights) shares nothing.
      if (m.config().untie_embeddings_and_output_weights) continue;
      if (st.pre_process || st.post_process) groups.embd->all_reduce(m.stage_params().embedding.word_embeddings->grad)->wait();
    }
  }
  ddp.start_grad_sync();
  ddp.finish_grad_sync();
}

}  // namespace tripod::distributed
