// The CLI is a module of its own, so that the library's users do not
// require what only the CLI uses. It has no replace directive, which would
// stop `go install github.com/dlock-go/dlock/cmd/dlock@latest`: in the
// repository it builds against the library beside it through go.work (run
// `go mod tidy` here with a temporary replace of github.com/dlock-go/dlock).
module github.com/dlock-go/dlock/cmd/dlock

go 1.21

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/dlock-go/dlock v0.0.0-20261128164520-cf6e667c9dac
	github.com/gdamore/tcell/v2 v2.7.4
	github.com/jedib0t/go-pretty/v6 v6.8.3
	github.com/redis/go-redis/v9 v9.17.3
	github.com/rogpeppe/go-internal v1.12.0
	github.com/spf13/cobra v1.10.2
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.30.0
	golang.org/x/term v0.29.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/gdamore/encoding v1.0.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/lucasb-eyer/go-colorful v1.2.0 // indirect
	github.com/mattn/go-runewidth v0.0.16 // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	golang.org/x/text v0.22.0 // indirect
	golang.org/x/tools v0.21.1-0.20240508182429-e35e4ccd0d2d // indirect
)
