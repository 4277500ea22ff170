package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// libraryPath is the module whose locks dlock runs.
const libraryPath = "github.com/dlock-go/dlock"

// versionText describes the running binary from its build information:
// the module version of the CLI and of the library it was built with,
// the VCS revision when the build recorded one, and the Go release.
func versionText(info *debug.BuildInfo, ok bool) string {
	if !ok {
		return "dlock (no build information)\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "dlock %s\n", moduleVersion(info.Main))
	for _, dep := range info.Deps {
		if dep.Path == libraryPath {
			fmt.Fprintf(&b, "library %s %s\n", libraryPath, moduleVersion(*dep))
		}
	}
	var revision, at string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified, _ = strconv.ParseBool(s.Value)
		}
	}
	if revision != "" {
		fmt.Fprintf(&b, "revision %s", revision)
		if at != "" {
			fmt.Fprintf(&b, " (%s)", at)
		}
		if modified {
			b.WriteString(", with uncommitted changes")
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "built with %s\n", info.GoVersion)
	return b.String()
}

// moduleVersion is m's version, or "(devel)" for a module built from a
// checkout (go run, go build in the repository), whose version the build
// does not know.
func moduleVersion(m debug.Module) string {
	v := m.Version
	if m.Replace != nil {
		v = m.Replace.Version
	}
	if v == "" {
		v = "(devel)"
	}
	return v
}

// versionCmd is "dlock version"; "dlock --version" prints the same.
func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print dlock's version, its library's, and the VCS revision it was built from",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			printVersion(a.stdout)
			return nil
		},
	}
}

func printVersion(w io.Writer) {
	info, ok := debug.ReadBuildInfo()
	fmt.Fprint(w, versionText(info, ok))
}
