module github.com/dlock-go/dlock

go 1.21

require (
	github.com/alicebob/miniredis/v2 v2.40.0
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
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/mattn/go-runewidth v0.0.16 // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	golang.org/x/text v0.22.0 // indirect
	golang.org/x/tools v0.21.1-0.20240508182429-e35e4ccd0d2d // indirect
)
