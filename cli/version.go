package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// buildVersion is what `paddock version` prints and what telemetry reports
// as service.version, read from the build info the Go toolchain embeds.
type buildVersion struct {
	// Version is the main module's version: a tag, a pseudo-version
	// (Go 1.24+ stamps one from the VCS, "+dirty" when modified), or
	// "(devel)".
	Version string `json:"version"`
	// Revision is vcs.revision, Modified vcs.modified, when present.
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go,omitempty"`
}

// readVersion reads this binary's build info.
func readVersion() buildVersion { return versionFrom(debug.ReadBuildInfo()) }

func versionFrom(bi *debug.BuildInfo, ok bool) buildVersion {
	v := buildVersion{Version: "(devel)"}
	if !ok || bi == nil {
		return v
	}
	v.Go = bi.GoVersion
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is service.version: the module version, or the revision (with
// "+dirty" when modified) when the version is "(devel)".
func (v buildVersion) String() string {
	if v.Version != "(devel)" || v.Revision == "" {
		return v.Version
	}
	s := v.Revision
	if v.Modified {
		s += "+dirty"
	}
	return s
}

func versionCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print paddock's version, VCS revision and Go version (from the build info)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return printVersion(cmd.OutOrStdout(), readVersion(), output)
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func printVersion(w io.Writer, v buildVersion, output string) error {
	if output == "json" {
		return json.NewEncoder(w).Encode(v)
	}
	line := "paddock " + v.Version
	if v.Revision != "" {
		line += " (revision " + v.Revision
		if v.Modified {
			line += ", modified"
		}
		line += ")"
	}
	if v.Go != "" {
		line += " " + v.Go
	}
	_, err := fmt.Fprintln(w, line)
	return err
}
