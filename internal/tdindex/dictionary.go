package tdindex

import (
	"maps"
	"sync"
	"sync/atomic"
)

// The search fields of 10k TDs are ~3.5 MB of lower-cased text, most of it
// words that many TDs repeat (rooms, devices, quantities, verbs, the words
// of a vendor's descriptions). In memory a Summary keeps each field with
// those words replaced by 2-byte codes of its Index's dictionary, and a
// text search reads the coded field (Matcher) or expands it into a scratch
// buffer. The stored summary holds the plain text (Index.Encode expands
// it), so the codes never leave the Index.
//
// A code is two bytes: 0xF8 | space<<2 | code>>8, then code&0xFF, where
// space says a space follows the word (most words are followed by one).
// Bytes 0xF8–0xFF never occur in UTF-8; a field's own byte in that range
// (a document decoded without UTF-8 checks) is written as the escape code
// and the byte.
const (
	wordCodeByte = 0xF8
	spaceBit     = 0x04
	escapeCode   = 0x3FF
	// maxWordCodes bounds the dictionary: at most 1,023 words of at most
	// maxCodedWord bytes, ~70 KB with its map. Words come first come,
	// first coded; once it is full, new words stay plain text (hostile
	// input can fill it, which costs memory, never results).
	maxWordCodes = escapeCode
	// escapeBytes are the escape code's two bytes, which no other code
	// begins with (code 0x3FF is never given).
	escapeBytes = "\xfb\xff"
	// Only words of lower-case ASCII letters, 3 to maxCodedWord bytes, are
	// coded: a shorter word gains nothing from a 2-byte code, and numbers,
	// identifiers and hashes are mostly unique to one TD.
	minCodedWord = 3
	maxCodedWord = 24
)

// wordDict is an Index's dictionary. Codes are never reassigned: a code,
// once given, reads back as its word for the Index's life. words[i] is
// written once, and n counts it, before the map that gives code i is
// published: whoever holds a code can read its word.
type wordDict struct {
	mu sync.Mutex // serialises additions
	// codes is replaced whole by each addition (at most maxWordCodes
	// copies in an Index's life), so looking a word up, which every
	// PUT does for each word of its search fields, takes no lock.
	codes atomic.Pointer[map[string]uint16]
	words [maxWordCodes]string
	n     atomic.Uint32
}

// code returns the code of word, giving it one if the dictionary has room.
func (d *wordDict) code(word []byte) (uint16, bool) {
	if len(word) < minCodedWord || len(word) > maxCodedWord {
		return 0, false
	}
	for i := range len(word) {
		if c := word[i]; c < 'a' || c > 'z' {
			return 0, false
		}
	}
	if m := d.codes.Load(); m != nil {
		if c, ok := (*m)[string(word)]; ok {
			return c, true
		}
	}
	if d.n.Load() >= maxWordCodes {
		return 0, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.codes.Load()
	if m != nil {
		if c, ok := (*m)[string(word)]; ok {
			return c, true
		}
	}
	n := d.n.Load()
	if n >= maxWordCodes {
		return 0, false
	}
	next := make(map[string]uint16, n+1)
	if m != nil {
		maps.Copy(next, *m)
	}
	w := string(word) // a copy: word is a view of the text being coded
	d.words[n] = w
	d.n.Store(n + 1)
	next[w] = uint16(n)
	d.codes.Store(&next)
	return uint16(n), true
}

// word returns the word of code c ("" for a code never given).
func (d *wordDict) word(c uint16) string {
	if uint32(c) >= d.n.Load() {
		return ""
	}
	return d.words[c]
}

// compress appends text to out with its dictionary words coded.
func (d *wordDict) compress(out []byte, text []byte) []byte {
	for i := 0; i < len(text); {
		if !isWordByte(text[i]) {
			out = appendLiteral(out, text[i])
			i++
			continue
		}
		// A whole run of word bytes or nothing: a search term (letters and
		// digits only) then lies within one run, in a code or plain.
		j := i
		for j < len(text) && isWordByte(text[j]) {
			j++
		}
		if c, ok := d.code(text[i:j]); ok {
			first := wordCodeByte | byte(c>>8)
			if j < len(text) && text[j] == ' ' {
				first |= spaceBit
				j++
			}
			out = append(out, first, byte(c))
		} else {
			for k := i; k < j; k++ {
				out = appendLiteral(out, text[k])
			}
		}
		i = j
	}
	return out
}

func appendLiteral(out []byte, c byte) []byte {
	if c >= wordCodeByte {
		return append(out, wordCodeByte|escapeCode>>8, escapeCode&0xFF, c)
	}
	return append(out, c)
}

// expand appends the text compress coded as f to out. A truncated code
// (only in damaged input) ends the text.
func (d *wordDict) expand(out []byte, f string) []byte {
	for len(f) > 0 {
		i := 0
		for i < len(f) && f[i] < wordCodeByte {
			i++
		}
		out = append(out, f[:i]...)
		if i+1 >= len(f) {
			return out
		}
		first := f[i]
		c := uint16(first&3)<<8 | uint16(f[i+1])
		f = f[i+2:]
		if c == escapeCode && first&spaceBit == 0 {
			if len(f) == 0 {
				return out
			}
			out = append(out, f[0])
			f = f[1:]
			continue
		}
		out = append(out, d.word(c)...)
		if first&spaceBit != 0 {
			out = append(out, ' ')
		}
	}
	return out
}
