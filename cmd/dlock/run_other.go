//go:build unix && !linux

package main

import "syscall"

// parentDeathSignal does nothing: only Linux has one. A command whose dlock
// died keeps running unprotected until it ends.
func parentDeathSignal(*syscall.SysProcAttr) {}
