package mcpdoor

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// Tool names (PROTOCOL §11.2): clients accept [A-Za-z0-9_-] and at most 64
// characters, and a model reads them. A Thing's action is
// "<title>__<action>", a group's "group_<group>__<action>", each part made
// of its words joined by "_". Names depend only on the Thing's id, title
// and action and on which other Things share the title, never on the order
// Things arrived in, so a name is the same after a restart.

const (
	maxNameLen = 64
	// hashLen is the length of the suffix that tells apart Things whose
	// titles read the same.
	hashLen = 6
	// Reserved names of the door's own tools.
	findToolsName = "find_tools"
	callToolName  = "call_tool"
)

// slug turns s into lower-case ASCII words joined by "_": accents are
// dropped (é → e), any other character separates words.
func slug(s string, lower bool) string {
	var b strings.Builder
	gap := false
	for _, r := range norm.NFKD.String(s) {
		switch {
		case unicode.Is(unicode.Mn, r):
			continue // an accent NFKD split off
		case r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			if gap && b.Len() > 0 {
				b.WriteByte('_')
			}
			gap = false
			if lower {
				r = unicode.ToLower(r)
			}
			b.WriteRune(r)
		default:
			gap = true
		}
	}
	return b.String()
}

// tag is a short, stable tag of key: base32 of its SHA-256, lower case.
func tag(key string) string {
	sum := sha256.Sum256([]byte(key))
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:]))[:hashLen]
}

// toolName joins the parts of a tool name: prefix (a Thing's title slug,
// or a group's), an optional tag telling it apart from others with the
// same prefix, and the action's slug. The prefix is cut to fit 64
// characters; an action whose name alone is too long is cut and tagged.
func toolName(prefix, disambig, action, key string) string {
	if prefix == "" {
		prefix = "thing"
	}
	act := slug(action, false)
	if act == "" {
		act = "action"
	}
	if len(act) > maxNameLen/2 {
		act = act[:maxNameLen/2-hashLen-1] + "_" + tag(key+"\x00"+action)
	}
	tail := "__" + act
	if disambig != "" {
		tail = "_" + disambig + tail
	}
	if room := maxNameLen - len(tail); len(prefix) > room {
		prefix = strings.TrimRight(prefix[:room], "_")
	}
	return prefix + tail
}

// validName reports whether s is a name clients accept.
func validName(s string) bool {
	if s == "" || len(s) > maxNameLen {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
