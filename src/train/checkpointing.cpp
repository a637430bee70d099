// Checkpoint save/load of the trainer's state (see ckpt/).
#include "base/error.h"
#include "train/trainer.h"

namespace tripod::train {

void Trainer::save_checkpoint() {
  TRIPOD_FAIL("--save: checkpointing is not available in this build yet");
}

void Trainer::load_checkpoint() {
  TRIPOD_FAIL("--load: checkpointing is not available in this build yet");
}

}  // namespace tripod::train
