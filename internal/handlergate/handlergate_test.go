package handlergate

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// counter is a driver.Handler that counts its calls and notes any two that
// overlap.
type counter struct {
	calls, inside, overlaps atomic.Int32
}

func (c *counter) call() {
	if c.inside.Add(1) > 1 {
		c.overlaps.Add(1)
	}
	time.Sleep(time.Microsecond) // widen the window an overlap would need
	c.inside.Add(-1)
	c.calls.Add(1)
}

func (c *counter) Message(string, string) { c.call() }
func (c *counter) Reset()                 { c.call() }

func TestCallsAreSerializedAndStopAtClose(t *testing.T) {
	c := &counter{}
	g := New(c)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				g.Message("ch", "p")
				g.Reset()
			}
		}()
	}
	wg.Wait()
	if n := c.calls.Load(); n != 1600 {
		t.Fatalf("%d calls passed on, want 1600", n)
	}
	if n := c.overlaps.Load(); n != 0 {
		t.Fatalf("%d calls overlapped another", n)
	}
	g.Close()
	g.Message("ch", "p")
	g.Reset()
	if n := c.calls.Load(); n != 1600 {
		t.Fatalf("%d calls passed on after Close", n-1600)
	}
}
