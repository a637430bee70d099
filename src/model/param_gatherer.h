// The seam through which a data-parallel scheme that keeps parameters (or
// their gradients) elsewhere between uses learns when the model needs them:
// "the parameters of group g are needed now" and "done with them". The
// model calls it around every use of a parameter group (GptModel::
// param_groups(): the embedding, one per layer, the head); it does not know
// what the implementation does (distributed/: ZeRO-3 gathers the group's
// shards and frees the copy after use, ZeRO-2 binds a gradient bucket).
//
// Order of calls per micro-batch (NOTE [Parameter hooks] in gpt_model.cpp):
//   forward:  before(g, Forward) ... after(g, Forward) for each group in
//             order; on the last stage with gradients the loss head's
//             backward runs inside forward: before(head, Backward) there;
//             on a stage that also holds the embedding the head reads the
//             tied output weight, so the embedding's group is asked for
//             (and released) around the head too.
//   backward: before(g, Backward), the group's recompute and backward (its
//             gradients written), grads_written(g), after(g, Backward), from
//             the head to the embedding.
// Calls may repeat a group (before() of a group already available is the
// implementation's no-op).
#pragma once

#include <cstdint>

namespace tripod::model {

class ParamGatherer {
 public:
  enum class Pass : uint8_t { Forward, Backward };
  virtual ~ParamGatherer() = default;
  // Group g's weights must be readable (Param::value, ::compute) when this
  // returns; with Backward its gradients (Param::grad) must be writable too
  // (they accumulate: += into what the micro-batch wrote so far).
  virtual void before(int group, Pass pass) = 0;
  // The pass is done reading group g's weights for this micro-batch.
  virtual void after(int group, Pass pass) = 0;
  // This micro-batch's backward has written the last of group g's gradients.
  virtual void grads_written(int group) = 0;
};

}  // namespace tripod::model
