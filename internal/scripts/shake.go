package scripts

import "strings"

// shake returns lib without the helpers that body never names, directly
// or through the helpers it keeps. Lua defines every helper of a script on
// each call, whether or not the call runs it, and each definition costs
// the server about as much as a string operation. Helpers name only those
// defined before them (they are locals), so one pass from the last helper
// back decides each after everything that could call it. Text outside the
// helpers (comments) stays; a helper named only in a comment or another
// kept helper's comment stays too, which costs a definition and nothing
// else.
//
// It runs at package init for every script, in every program that imports
// dlock: it scans with strings.Index and keeps substrings of lib, without
// regular expressions or copies.
func shake(lib, body string) string {
	chunks := libChunks(lib)
	keep := make([]bool, len(chunks))
	for i := len(chunks) - 1; i >= 0; i-- {
		name := chunks[i].name
		keep[i] = name == "" || names(body, name)
		for j := i + 1; j < len(chunks) && !keep[i]; j++ {
			keep[i] = keep[j] && names(chunks[j].text, name)
		}
	}
	var out strings.Builder
	out.Grow(len(lib))
	for i, c := range chunks {
		if keep[i] {
			out.WriteString(c.text)
		}
	}
	return out.String()
}

// libChunk is a part of a lib: a helper with the comments in front of it
// (name is the helper's), or text after the last helper (name "").
type libChunk struct{ name, text string }

// libFuncPrefix opens a helper in a lib file: helpers are top-level
// "local function name(" blocks that close with "end" at the start of a
// line (nested blocks are indented).
const libFuncPrefix = "local function "

// libChunks cuts lib into its helpers, each with the text before it.
func libChunks(lib string) []libChunk {
	var chunks []libChunk
	start, name := 0, ""
	for at := 0; at < len(lib); {
		line := lib[at:]
		if i := strings.IndexByte(line, '\n'); i >= 0 {
			line = line[:i+1]
		}
		if name == "" && strings.HasPrefix(line, libFuncPrefix) {
			name, _, _ = strings.Cut(line[len(libFuncPrefix):], "(")
		}
		at += len(line)
		if name != "" && strings.TrimRight(line, "\r\n") == "end" {
			chunks = append(chunks, libChunk{name, lib[start:at]})
			start, name = at, ""
		}
	}
	if start < len(lib) {
		chunks = append(chunks, libChunk{name, lib[start:]})
	}
	return chunks
}

// names reports whether text holds the Lua identifier word as a whole
// word.
func names(text, word string) bool {
	for from := 0; ; {
		i := strings.Index(text[from:], word)
		if i < 0 {
			return false
		}
		i += from
		end := i + len(word)
		if (i == 0 || !luaIdentByte(text[i-1])) && (end == len(text) || !luaIdentByte(text[end])) {
			return true
		}
		from = end
	}
}

// luaIdentByte reports whether b may appear in a Lua identifier.
func luaIdentByte(b byte) bool {
	return b == '_' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
}
