package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gdamore/tcell/v2"
)

// topScreen is the state of the live view: the last frame, its sort and
// filter, and what the keyboard is typing.
type topScreen struct {
	scr      tcell.Screen
	pattern  string
	interval time.Duration
	frame    *topFrame
	err      error
	by       topSort
	filter   string
	editing  bool   // "/" was typed: keys go to the filter
	typed    string // the filter being typed
}

// runTopScreen shows the live view until q, Ctrl-C or the end of ctx. It
// owns two goroutines, the reader of frames and tcell's event pump, and
// stops both before restoring the terminal.
func runTopScreen(ctx context.Context, src *topSource, interval time.Duration, pattern string) error {
	scr, err := tcell.NewScreen()
	if err != nil {
		return fmt.Errorf("dlock top: opening the terminal: %w", err)
	}
	if err := scr.Init(); err != nil {
		return fmt.Errorf("dlock top: opening the terminal: %w", err)
	}
	defer scr.Fini() // leaves the alternate screen, shows the cursor, restores termios

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	type result struct {
		f   *topFrame
		err error
	}
	frames := make(chan result)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			f, err := src.next(ctx)
			select {
			case frames <- result{f, err}:
			case <-ctx.Done():
				return
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	events := make(chan tcell.Event)
	quit := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		scr.ChannelEvents(events, quit)
	}()
	defer close(quit) // runs before wg.Wait: the pump returns

	ts := &topScreen{scr: scr, pattern: pattern, interval: interval}
	ts.draw()
	for {
		select {
		case <-ctx.Done():
			return nil
		case r := <-frames:
			if r.err != nil && ctx.Err() == nil {
				ts.err = r.err
			} else if r.err == nil {
				ts.frame, ts.err = r.f, nil
			}
		case ev, ok := <-events:
			if !ok || ts.handle(ev) {
				return nil
			}
		}
		ts.draw()
	}
}

// handle applies one terminal event and reports whether to quit.
func (ts *topScreen) handle(ev tcell.Event) bool {
	switch ev := ev.(type) {
	case *tcell.EventResize:
		ts.scr.Sync()
	case *tcell.EventKey:
		if ev.Key() == tcell.KeyCtrlC {
			return true
		}
		if ts.editing {
			ts.edit(ev)
			return false
		}
		switch ev.Key() {
		case tcell.KeyEscape:
			ts.filter = ""
		case tcell.KeyRune:
			return ts.command(ev.Rune())
		}
	}
	return false
}

// command runs the key r outside the filter's editing.
func (ts *topScreen) command(r rune) bool {
	switch r {
	case 'q':
		return true
	case 'w':
		ts.by = sortWait
	case 'c':
		ts.by = sortWaiters
	case 'h':
		ts.by = sortHeld
	case 'g':
		ts.by = sortRate
	case 'n':
		ts.by = sortName
	case '/':
		ts.editing, ts.typed = true, ts.filter
	}
	return false
}

// edit applies a key to the filter being typed.
func (ts *topScreen) edit(ev *tcell.EventKey) {
	switch ev.Key() {
	case tcell.KeyEnter:
		ts.filter, ts.editing = ts.typed, false
	case tcell.KeyEscape:
		ts.filter, ts.typed, ts.editing = "", "", false
	case tcell.KeyBackspace, tcell.KeyBackspace2:
		if r := []rune(ts.typed); len(r) > 0 {
			ts.typed = string(r[:len(r)-1])
		}
	case tcell.KeyRune:
		ts.typed += string(ev.Rune())
	}
}

// draw paints the whole screen: a header line, the table, the keys.
func (ts *topScreen) draw() {
	ts.scr.Clear()
	w, h := ts.scr.Size()
	pattern := ts.pattern
	if pattern == "" {
		pattern = "*"
	}
	head := fmt.Sprintf("dlock top  %q  every %v  sort: %s", pattern, ts.interval, sortNames[ts.by])
	if ts.filter != "" {
		head += fmt.Sprintf("  filter: %q", ts.filter)
	}
	bold := tcell.StyleDefault.Bold(true)
	drawLine(ts.scr, 0, w, bold, head)
	y := 2
	switch {
	case ts.err != nil:
		drawLine(ts.scr, y, w, tcell.StyleDefault, "error: "+ts.err.Error())
		y += 2
	case ts.frame == nil:
		drawLine(ts.scr, y, w, tcell.StyleDefault, "reading...")
	}
	if ts.frame != nil {
		ts.frame.sortBy(ts.by)
		for _, line := range strings.Split(strings.TrimRight(ts.frame.render(ts.filter), "\n"), "\n") {
			if y >= h-1 {
				break
			}
			drawLine(ts.scr, y, w, tcell.StyleDefault, line)
			y++
		}
	}
	foot := "w wait  c waiters  h held  g grants/s  n name  / filter  q quit"
	if ts.editing {
		foot = "filter: " + ts.typed + "_  (Enter apply, Esc clear)"
	}
	drawLine(ts.scr, h-1, w, tcell.StyleDefault.Reverse(true), foot)
	ts.scr.Show()
}

// drawLine writes text on row y, cut at width w.
func drawLine(scr tcell.Screen, y, w int, style tcell.Style, text string) {
	x := 0
	for _, r := range text {
		if x >= w {
			return
		}
		scr.SetContent(x, y, r, nil, style)
		x++
	}
}
