// Package confirm keeps track of the subscription confirmations that
// callers of a pub/sub connection wait for: each SUBSCRIBE (or SSUBSCRIBE)
// registers a channel per name, and the server's confirmation closes them.
package confirm

// Waiters holds the confirmations awaited, per pub/sub channel name. It is
// not safe for concurrent use: its owner's mutex guards it.
type Waiters map[string][]chan struct{}

// Expect registers one confirmation to wait for on each channel, in order.
func (w Waiters) Expect(channels []string) []chan struct{} {
	confirmed := make([]chan struct{}, len(channels))
	for i, ch := range channels {
		confirmed[i] = make(chan struct{})
		w[ch] = append(w[ch], confirmed[i])
	}
	return confirmed
}

// Forget drops the confirmations Expect returned for channels, after the
// subscribe they were for failed.
func (w Waiters) Forget(channels []string, confirmed []chan struct{}) {
	for i, ch := range channels {
		list := w[ch]
		for j, c := range list {
			if c == confirmed[i] {
				list = append(list[:j], list[j+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(w, ch)
		} else {
			w[ch] = list
		}
	}
}

// Take removes and returns the confirmations awaited on channel, for the
// caller to close once it no longer holds the owner's mutex.
func (w Waiters) Take(channel string) []chan struct{} {
	list := w[channel]
	delete(w, channel)
	return list
}
