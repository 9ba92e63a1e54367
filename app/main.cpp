// hpctrain: one executable, subcommands prepare | train | eval | inspect.
// Catches ht::Error and maps it to the documented exit codes; see README "Exit codes".
#include "app/commands.h"

int main(int argc, char** argv) { return ht::app::run_main(argc, argv); }
