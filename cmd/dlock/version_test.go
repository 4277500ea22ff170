package main

import (
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

func TestVersionTextNamesTheRevision(t *testing.T) {
	info := &debug.BuildInfo{
		GoVersion: "go1.23.4",
		Main:      debug.Module{Path: "github.com/dlock-go/dlock/cmd/dlock", Version: "v1.2.3"},
		Deps:      []*debug.Module{{Path: libraryPath, Version: "v1.2.0"}, {Path: "github.com/spf13/cobra", Version: "v1.8.1"}},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abcd"},
			{Key: "vcs.time", Value: "2026-11-28T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	want := "dlock v1.2.3\nlibrary github.com/dlock-go/dlock v1.2.0\n" +
		"revision 0123abcd (2026-11-28T10:00:00Z), with uncommitted changes\nbuilt with go1.23.4\n"
	if got := versionText(info, true); got != want {
		t.Errorf("versionText:\n%s\nwant:\n%s", got, want)
	}
	info.Main.Version, info.Settings = "", nil
	if got := versionText(info, true); !strings.HasPrefix(got, "dlock (devel)\n") || strings.Contains(got, "revision") {
		t.Errorf("versionText of a checkout build without VCS information: %q", got)
	}
}

func TestWaitFlagTakesDurationsAndSeconds(t *testing.T) {
	for in, want := range map[string]time.Duration{"10": 10 * time.Second, "0.5": 500 * time.Millisecond, "0": 0, "1m30s": 90 * time.Second, "250ms": 250 * time.Millisecond} {
		var d time.Duration
		if err := (waitFlag{&d}).Set(in); err != nil || d != want {
			t.Errorf("--wait %s: %v, %v; want %v", in, d, err, want)
		}
	}
	for _, in := range []string{"soon", "-1", "1e300", ""} {
		var d time.Duration
		if err := (waitFlag{&d}).Set(in); err == nil {
			t.Errorf("--wait %q: accepted as %v; want an error", in, d)
		}
	}
}
