package chaos

// Reply decodes arbitrary bytes into a value of the shape a script reply has
// after a driver normalised it (nil, int64, string, or []any of those,
// nested), for fuzzing the parsers of script replies: every input maps to
// some reply, and small inputs reach the interesting ones (short arrays,
// wrong element types, negative and huge integers).
func Reply(data []byte) any {
	r := replyReader{data: data}
	return r.value(0)
}

type replyReader struct {
	data []byte
	pos  int
}

func (r *replyReader) byte() (byte, bool) {
	if r.pos >= len(r.data) {
		return 0, false
	}
	b := r.data[r.pos]
	r.pos++
	return b, true
}

func (r *replyReader) value(depth int) any {
	tag, ok := r.byte()
	if !ok {
		return nil
	}
	switch tag % 5 {
	case 0:
		return nil
	case 1: // a small integer, the common case: codes and counts
		b, _ := r.byte()
		return int64(int8(b))
	case 2: // a full 64-bit integer
		var v uint64
		for i := 0; i < 8; i++ {
			b, _ := r.byte()
			v = v<<8 | uint64(b)
		}
		return int64(v)
	case 3: // a string of up to 31 bytes
		n, _ := r.byte()
		n %= 32
		end := r.pos + int(n)
		if end > len(r.data) {
			end = len(r.data)
		}
		s := string(r.data[r.pos:end])
		r.pos = end
		return s
	default: // an array of up to 7 elements, nested up to 3 deep
		n, _ := r.byte()
		n %= 8
		if depth >= 3 {
			n = 0
		}
		items := make([]any, n)
		for i := range items {
			items[i] = r.value(depth + 1)
		}
		return items
	}
}

// ReplyBytes encodes v (nil, int64, string, []any) in the form Reply
// decodes, for seeding fuzz corpora with well-formed replies.
func ReplyBytes(v any) []byte {
	switch v := v.(type) {
	case nil:
		return []byte{0}
	case int:
		return ReplyBytes(int64(v))
	case int64:
		out := []byte{2}
		for i := 7; i >= 0; i-- {
			out = append(out, byte(uint64(v)>>(8*i)))
		}
		return out
	case string:
		if len(v) > 31 {
			v = v[:31]
		}
		return append([]byte{3, byte(len(v))}, v...)
	case []any:
		out := []byte{4, byte(len(v))}
		for _, item := range v {
			out = append(out, ReplyBytes(item)...)
		}
		return out
	}
	panic("chaos: ReplyBytes: unsupported type")
}
