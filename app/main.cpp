// hpctrain: one executable, seven subcommands, one file each (app/cmd_<name>.cpp, registered
// through app/commands.h):
//   prepare   build a dataset file (or one shard per rank) from text files
//   train     train a model (config file + --set overrides; --resume)
//   eval      evaluate a checkpoint on the validation split
//   inspect   describe and verify a dataset or checkpoint file
//   generate  continue a prompt with a checkpoint's model (greedy or sampled)
//   export    write a checkpoint's model as a Hugging Face GPT-2 directory
//   plot      draw loss (and accuracy) curves of runs with gnuplot
// `hpctrain --help` lists them and `hpctrain <subcommand> --help` gives each one's options.
// run_main (app/dispatch.cpp) catches ht::Error and maps it to the documented exit codes; see
// README "Exit codes".
#include "app/commands.h"

int main(int argc, char** argv) { return ht::app::run_main(argc, argv); }
