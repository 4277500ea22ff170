package scripts

import (
	"regexp"
	"strings"
)

// libFunc matches the first line of a helper in a lib file: helpers are
// top-level "local function name(" blocks that close with "end" at the
// start of a line (nested blocks are indented).
var libFunc = regexp.MustCompile(`^local function ([A-Za-z_][A-Za-z0-9_]*)\(`)

// luaWord matches a Lua identifier.
var luaWord = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

// shake returns lib without the helpers that body never names, directly
// or through the helpers it keeps. Lua defines every helper of a script on
// each call, whether or not the call runs it, and each definition costs
// the server about as much as a string operation. Helpers name only those
// defined before them (they are locals), so one pass from the last helper
// back decides each after everything that could call it. Text outside the
// helpers (comments) stays; a helper named only in a comment stays too,
// which costs a definition and nothing else.
func shake(lib, body string) string {
	type chunk struct{ name, text string }
	var chunks []chunk
	var cur strings.Builder
	name := ""
	for _, line := range strings.SplitAfter(lib, "\n") {
		if m := libFunc.FindStringSubmatch(line); m != nil && name == "" {
			name = m[1]
		}
		cur.WriteString(line)
		if name != "" && strings.TrimRight(line, "\r\n") == "end" {
			chunks = append(chunks, chunk{name, cur.String()})
			cur.Reset()
			name = ""
		}
	}
	if cur.Len() > 0 {
		chunks = append(chunks, chunk{name, cur.String()})
	}
	named := map[string]bool{}
	note := func(text string) {
		for _, w := range luaWord.FindAllString(text, -1) {
			named[w] = true
		}
	}
	note(body)
	keep := make([]bool, len(chunks))
	for i := len(chunks) - 1; i >= 0; i-- {
		if keep[i] = chunks[i].name == "" || named[chunks[i].name]; keep[i] {
			note(chunks[i].text)
		}
	}
	var out strings.Builder
	for i, c := range chunks {
		if keep[i] {
			out.WriteString(c.text)
		}
	}
	return out.String()
}
