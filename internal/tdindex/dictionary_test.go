package tdindex

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestWordDictionaryBounded: once a dictionary is full, new words stay
// plain text and every field still reads back whole.
func TestWordDictionaryBounded(t *testing.T) {
	var d wordDict
	var text strings.Builder
	for i := range maxWordCodes + 10 {
		text.WriteString(word(i) + " ")
	}
	coded := d.compress(nil, []byte(text.String()))
	if d.n.Load() != maxWordCodes {
		t.Fatalf("dictionary holds %d words, want its bound %d", d.n.Load(), maxWordCodes)
	}
	if got := string(d.expand(nil, string(coded))); got != text.String() {
		t.Fatalf("a full dictionary lost text")
	}
	if _, ok := d.code([]byte(word(maxWordCodes + 100))); ok {
		t.Fatalf("a full dictionary coded a new word")
	}
}

// word is the i-th of distinct words the dictionary codes.
func word(i int) string {
	b := []byte("zzq")
	for ; i > 0; i /= 26 {
		b = append(b, byte('a'+i%26))
	}
	return string(b)
}

// TestWordDictionaryConcurrent: writers coding texts with new words while
// others read them back, as concurrent PUTs and searches do (run with
// -race).
func TestWordDictionaryConcurrent(t *testing.T) {
	var d wordDict
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				text := fmt.Sprintf("shared words %s and %s, then more", strings.Repeat("ab", 2+i%7), strings.Repeat("cd", 2+(g*i)%9))
				if got := string(d.expand(nil, string(d.compress(nil, []byte(text))))); got != text {
					t.Errorf("%q came back as %q", text, got)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestIndexesKeepTheirOwnWords: each Index codes with its own dictionary
// (no state shared through the package): filling one leaves another
// coding, and each reads its own summaries back.
func TestIndexesKeepTheirOwnWords(t *testing.T) {
	full, fresh := New(), New()
	var words strings.Builder
	for i := range maxWordCodes + 1 {
		words.WriteString(word(i) + " ")
	}
	full.dict.compress(nil, []byte(words.String()))
	if full.dict.n.Load() != maxWordCodes || fresh.dict.n.Load() != 0 {
		t.Fatalf("dictionaries hold %d and %d words", full.dict.n.Load(), fresh.dict.n.Load())
	}
	doc := parse(t, []byte(`{"title":"Living room thermostat","description":"keeps the temperature"}`))
	for _, ix := range []*Index{full, fresh} {
		s := summarize(ix, doc)
		if got := fieldsOf(ix, s); len(got) != 2 || got[0].text != "living room thermostat" || got[1].text != "keeps the temperature" {
			t.Fatalf("fields read back as %+v", got)
		}
	}
	if fresh.dict.n.Load() == 0 {
		t.Fatalf("an Index with room coded no words")
	}
}

// FuzzCodedText: coding a field's text and expanding it gives it back,
// whatever its bytes.
func FuzzCodedText(f *testing.F) {
	f.Add("keeps the living room thermostat at a target temperature")
	f.Add("grösse \xf8\xff thermostat\xfftemperature")
	f.Add("")
	var d wordDict
	f.Fuzz(func(t *testing.T, text string) {
		if got := string(d.expand(nil, string(d.compress(nil, []byte(text))))); got != text {
			t.Fatalf("%q came back as %q", text, got)
		}
	})
}
