// The weights a run starts from: model.init_from (interop/init_from.h) for a new run; a run that
// resumes from a checkpoint takes the checkpoint's weights instead, so resume wins over init_from.
#pragma once
#include "comm/communicator.h"
#include "config/config.h"
#include "model/gpt.h"
#include "train/trainer.h"

namespace ht::train {

// Collective (agreed): every rank loads model.init_from itself, so a bad source ends the job with
// one message; the weights are identical on all ranks (LocalSgd then broadcasts rank 0's anyway).
// Does nothing when model.init_from is empty or when `resume` will find a checkpoint
// (--resume-from, or --resume with a checkpoint in the checkpoint directory).
void load_start_weights(model::GptImpl& gpt, const config::Config& cfg, const ResumeRequest& resume,
                        comm::Communicator& comm);

}  // namespace ht::train
