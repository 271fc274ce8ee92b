package cli

import (
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/job"
)

// Completion of flag values (`paddock completion bash|zsh|fish|powershell`
// prints the shell's script). Images and queues are the operator's lists
// when PADDOCK_IMAGES / PADDOCK_QUEUES are set, else the defaults of
// --images and --queues; nothing is asked over the network.

var (
	outputFormats = []string{"table", "json"}
	logFormats    = []string{"text", "json"}
	logLevels     = []string{"debug", "info", "warn", "error"}
	healModes     = []string{string(job.HealOff), string(job.HealRules), string(job.HealLLM)}
	defaultImages = []string{job.DefaultImage, "paddock/test:latest"}
	defaultQueues = []string{"critical", job.DefaultQueue, "low"}
)

// fixedCompletion completes a flag's value from values, never with file
// names.
func fixedCompletion(values ...string) cobra.CompletionFunc {
	return cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)
}

// envListCompletion completes from the comma-separated list in the
// variable env, or def.
func envListCompletion(env string, def []string) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		vals := def
		if v := os.Getenv(env); v != "" {
			vals = nil
			for s := range strings.SplitSeq(v, ",") {
				if s = strings.TrimSpace(s); s != "" {
					vals = append(vals, s)
				}
			}
		}
		return vals, cobra.ShellCompDirectiveNoFileComp
	}
}

// registerCompletion registers fn for flag on cmd; a missing flag is a
// programming error.
func registerCompletion(cmd *cobra.Command, flag string, fn cobra.CompletionFunc) {
	if err := cmd.RegisterFlagCompletionFunc(flag, fn); err != nil {
		panic(err)
	}
}
