package dnssd

import (
	"errors"
	"strings"
)

const domain = "local."

// escapeLabel writes s as one DNS label in presentation format: instance
// names may hold dots, spaces and backslashes (RFC 6763 §4.3).
func escapeLabel(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.' || c == '\\' || c == '(' || c == ')' || c == ';' || c == '"' || c == '@' || c == '$' || c == ' ':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < ' ' || c == 0x7f:
			b.WriteByte('\\')
			b.WriteByte('0' + c/100)
			b.WriteByte('0' + c/10%10)
			b.WriteByte('0' + c%10)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

var errBadName = errors.New("malformed domain name")

// splitFirstLabel returns the first label of a presentation-format name,
// unescaped, and the rest of the name (after the dot).
func splitFirstLabel(name string) (label, rest string, err error) {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch c {
		case '.':
			return b.String(), name[i+1:], nil
		case '\\':
			if i+1 >= len(name) {
				return "", "", errBadName
			}
			if d := name[i+1]; d >= '0' && d <= '9' {
				if i+3 >= len(name) {
					return "", "", errBadName
				}
				v := 0
				for _, x := range name[i+1 : i+4] {
					if x < '0' || x > '9' {
						return "", "", errBadName
					}
					v = v*10 + int(x-'0')
				}
				if v > 255 {
					return "", "", errBadName
				}
				b.WriteByte(byte(v))
				i += 3
				continue
			}
			b.WriteByte(name[i+1])
			i++
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errBadName
}

// serviceName is "_wot._tcp.local." for typ "_wot._tcp".
func serviceName(typ string) string { return strings.TrimSuffix(typ, ".") + "." + domain }

// parseTXT splits TXT strings into ordered key/value pairs; keys are
// case-insensitive and only the first occurrence counts (RFC 6763 §6.4).
// A string without "=" is a boolean attribute with an empty value.
func parseTXT(txt []string) map[string]string {
	out := make(map[string]string, len(txt))
	for _, s := range txt {
		k, v, _ := strings.Cut(s, "=")
		if k == "" {
			continue
		}
		k = strings.ToLower(k)
		if _, dup := out[k]; dup {
			continue
		}
		out[k] = v
	}
	return out
}

// HostLabel turns a host or hub name into a valid host label (what an
// Advertiser probes for before any rename): letters, digits and hyphens,
// at most 63 bytes.
func HostLabel(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
		if b.Len() >= 56 {
			break
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == "" {
		out = "lmos"
	}
	return out
}
