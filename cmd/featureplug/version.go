package main

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Set at build time with -ldflags "-X main.version=... -X main.commit=...
// -X main.buildDate=..." (the Makefile and the Dockerfile do). commit is
// the fallback when the Go build info has no VCS stamp: a build in a git
// worktree, or from a source tree without .git (the image's).
var (
	version   = "dev"
	commit    = ""
	buildDate = ""
)

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the featureplug version, commit and build date",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, _ := debug.ReadBuildInfo()
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionLine(info, commit, buildDate))
			return err
		},
	}
}

// versionLine describes the binary: its version, the commit it was built
// from (the Go build info's vcs.revision, else the one set at build time),
// whether the tree had changes, the commit's and the build's dates, the Go
// version and the platform.
func versionLine(info *debug.BuildInfo, ldCommit, ldBuildDate string) string {
	rev, committed, modified := ldCommit, "", false
	if info != nil {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				committed = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	parts := []string{"commit " + cmp.Or(rev, "unknown")}
	if modified {
		parts[0] += " (modified)"
	}
	if committed != "" {
		parts = append(parts, "committed "+committed)
	}
	parts = append(parts, "built "+cmp.Or(ldBuildDate, "unknown"))
	goVersion := runtime.Version()
	if info != nil && info.GoVersion != "" {
		goVersion = info.GoVersion
	}
	parts = append(parts, goVersion, runtime.GOOS+"/"+runtime.GOARCH)
	return fmt.Sprintf("featureplug %s (%s)", version, strings.Join(parts, ", "))
}
