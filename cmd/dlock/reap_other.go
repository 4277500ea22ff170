//go:build !linux

package main

import "os/exec"

// reaper does nothing outside Linux, where dlock is not a container's
// PID 1 (see reap_linux.go).
type reaper struct{}

func startReaper() *reaper { return nil }

func (*reaper) start(cmd *exec.Cmd) error { return cmd.Start() }

func (*reaper) commandReaped() {}

func (*reaper) stop() {}
