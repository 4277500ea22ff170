// Package glob implements Redis's glob patterns (KEYS, SCAN's MATCH) in Go:
// matching a name as the server would, and escaping a literal for a pattern.
package glob

import "strings"

// Escape escapes the characters that are special in a Redis glob, so that
// the pattern matches s itself.
func Escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Match reports whether s matches the Redis glob pattern, exactly as
// SCAN's MATCH does (Redis's stringmatchlen, case-sensitive, byte-wise).
func Match(pattern, s string) bool {
	skipLonger := false
	return matchFrom(pattern, s, &skipLonger)
}

// matchFrom is Redis's stringmatchlen_impl. skipLonger records that a
// '*' already tried every rest of s: an outer '*' trying shorter rests can
// only fail too, which keeps patterns like "*a*a*a*b" linear.
func matchFrom(p, s string, skipLonger *bool) bool {
	for len(p) > 0 && len(s) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 1 && p[1] == '*' {
				p = p[1:]
			}
			if len(p) == 1 {
				return true
			}
			for len(s) > 0 {
				if matchFrom(p[1:], s, skipLonger) {
					return true
				}
				if *skipLonger {
					return false
				}
				s = s[1:]
			}
			*skipLonger = true
			return false
		case '?':
			s = s[1:]
			p = p[1:]
		case '[':
			var match bool
			p, match = matchClass(p[1:], s[0])
			if !match {
				return false
			}
			s = s[1:]
		case '\\':
			if len(p) >= 2 {
				p = p[1:]
			}
			fallthrough
		default:
			if p[0] != s[0] {
				return false
			}
			s = s[1:]
			p = p[1:]
		}
		if len(s) == 0 {
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			break
		}
	}
	return len(p) == 0 && len(s) == 0
}

// matchClass matches c against the character class p begins with (after
// its '['), as Redis does: an unclosed class runs to the end of the
// pattern. It returns the pattern after the class.
func matchClass(p string, c byte) (rest string, match bool) {
	not := len(p) > 0 && p[0] == '^'
	if not {
		p = p[1:]
	}
	for len(p) > 0 {
		if p[0] == '\\' && len(p) >= 2 {
			p = p[1:]
			if p[0] == c {
				match = true
			}
		} else if p[0] == ']' {
			p = p[1:]
			break
		} else if len(p) >= 3 && p[1] == '-' {
			lo, hi := p[0], p[2]
			if lo > hi {
				lo, hi = hi, lo
			}
			if c >= lo && c <= hi {
				match = true
			}
			p = p[2:]
		} else if p[0] == c {
			match = true
		}
		p = p[1:]
	}
	return p, match != not
}
