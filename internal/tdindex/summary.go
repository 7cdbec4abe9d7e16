package tdindex

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
)

// Summary is what the registry keeps in memory about a Thing's document
// instead of the document itself: the few facts read on every request
// (title, types, affordance names), a Bloom filter of every member name
// and string value (to skip documents a JSONPath query cannot select), and
// the lower-cased fields capability search ranks. A parsed 2.4 KB TD costs
// about 12 KB of heap as a map tree. The document itself stays in the
// store and is parsed when a request needs it.
//
// All of it is kept in one string, the summary's stored encoding (Encode)
// with its search fields' words coded by the Index's dictionary, and read
// from there on demand: a Summary is one allocation besides the struct
// that holds it. Decoded into slices (types, names, the filter's words) it
// cost 10k TDs ~2.3 MB more in slice headers, small arrays and a second
// copy of the filter (docs/PERFORMANCE.md, issue 16).
//
// The zero Summary is not usable: a Summary comes from Index.Summarize or
// Index.Decode. It holds no lock, so a holder may embed it by value.
type Summary struct {
	// Title is the TD's title (a part of enc).
	Title string
	// enc is the encoding after its version byte. Decode checked it, so
	// the readers below walk it without checks.
	enc string
	// Offsets into enc: the affordance name lists (properties, actions,
	// events; each sorted), the search fields and the Bloom filter's bytes
	// (to the end; the little-endian words the store holds, so bit i is
	// byte i/8, bit i%8). The @type list follows the title (typesAt).
	namesAt             [3]uint32
	searchAt, searchEnd uint32
	bloomAt             uint32
}

// affordanceMembers are the affordance kinds in Summary.namesAt order.
var affordanceMembers = [3]string{"properties", "actions", "events"}

func kindOf(member string) int {
	return slices.Index(affordanceMembers[:], member)
}

// Secured reports what Summarize was told: whether the TD requires a
// security scheme other than nosec. The flag is the byte after the search
// fields.
func (s *Summary) Secured() bool { return s.enc[s.searchEnd] == 1 }

// Types returns the @type values.
func (s *Summary) Types() []string { return s.list(s.typesAt()) }

// AnyType reports whether match holds for one of the @type values, read
// in place (a search filters every Thing by type; Types would allocate).
func (s *Summary) AnyType(match func(t string) bool) bool {
	found := false
	s.eachString(s.typesAt(), func(_ int, t string) bool {
		found = match(t)
		return !found
	})
	return found
}

// typesAt is the offset of the @type list: after the title and its
// length (Decode keeps that length in its shortest form).
func (s *Summary) typesAt() uint32 {
	return uint32(uvarintLen(uint64(len(s.Title))) + len(s.Title))
}

func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// Affordances returns the sorted names of the Thing's properties, actions
// or events (member is the TD member name); nil for any other member.
func (s *Summary) Affordances(member string) []string {
	k := kindOf(member)
	if s == nil || k < 0 {
		return nil
	}
	return s.list(s.namesAt[k])
}

// HasAffordance reports whether the TD member ("properties", "actions",
// "events") has an affordance called name.
func (s *Summary) HasAffordance(member, name string) bool {
	k := kindOf(member)
	if s == nil || k < 0 {
		return false
	}
	found := false
	// The names are sorted (Decode checked): stop at the first one past
	// name.
	s.eachString(s.namesAt[k], func(_ int, v string) bool {
		found = v == name
		return v < name
	})
	return found
}

// nameAt returns the i-th name of affordance kind k ("" if none).
func (s *Summary) nameAt(k, i int) string {
	var name string
	s.eachString(s.namesAt[k], func(j int, v string) bool {
		if j == i {
			name = v
		}
		return j < i
	})
	return name
}

// list returns the encoded list of strings at enc[p:].
func (s *Summary) list(p uint32) []string {
	n, _ := uvarint(s.enc[p:])
	if n == 0 {
		return nil
	}
	out := make([]string, 0, n)
	s.eachString(p, func(_ int, v string) bool { out = append(out, v); return true })
	return out
}

// eachString calls fn with each string of the encoded list at enc[p:],
// while fn returns true.
func (s *Summary) eachString(p uint32, fn func(i int, v string) bool) {
	b := s.enc[p:]
	n, w := uvarint(b)
	b = b[w:]
	for i := range int(n) {
		l, w := uvarint(b)
		if !fn(i, b[w:w+int(l)]) {
			return
		}
		b = b[w+int(l):]
	}
}

// summaryParts are the facts of a Summary before they are encoded.
type summaryParts struct {
	title   string
	types   []string
	names   [3][]string
	bloom   []uint64
	search  string
	secured bool
}

// Summarize builds the Summary of a valid document and its encoding for
// the store. secured is the caller's judgement of the document's security
// (Summary.Secured reports it back).
func (ix *Index) Summarize(doc map[string]any, secured bool) (Summary, []byte) {
	var p summaryParts
	p.title, _ = doc["title"].(string)
	switch v := doc["@type"].(type) {
	case string:
		p.types = []string{v}
	case []any:
		for _, e := range v {
			if str, ok := e.(string); ok {
				p.types = append(p.types, str)
			}
		}
	}
	for k, member := range affordanceMembers {
		affs, _ := doc[member].(map[string]any)
		if len(affs) == 0 {
			continue
		}
		names := make([]string, 0, len(affs))
		for name := range affs {
			names = append(names, name)
		}
		slices.Sort(names)
		p.names[k] = names
	}
	p.bloom = newBloom(doc)
	p.search = searchFields(doc, p.title, &p.names)
	p.secured = secured
	enc := p.encode()
	s, err := ix.Decode(enc)
	if err != nil {
		panic("tdindex: a summary does not decode: " + err.Error()) // a bug in this package
	}
	return s, enc
}

// summaryVersion tags encoded summaries. A stored summary of another
// version is refused by Decode, and the registry rebuilds it from the
// document, so changing what a Summary holds only needs a new version here.
const summaryVersion = 3 // 2: Bloom filters hashed the same in every process; 3: Secured

// Encode encodes s, made or decoded by ix, for the store, which keeps it
// next to the Thing's metadata so that start-up rebuilds the registry
// without parsing (or even reading) the documents. The search fields are
// written in plain text: the encoding does not depend on the dictionary.
func (ix *Index) Encode(s *Summary) []byte {
	var search, buf []byte
	ix.eachField(s, &buf, func(kind byte, a, c int, text []byte) {
		search = appendField(search, kind, a, c, text)
	})
	b := append([]byte{summaryVersion}, s.enc[:s.searchAt]...)
	b = binary.AppendUvarint(b, uint64(len(search)))
	b = append(b, search...)
	return append(b, s.enc[s.searchEnd:]...)
}

// encode writes the summary's encoding: title, types, the three name
// lists, the search fields, the secured flag and the Bloom filter's words.
func (p *summaryParts) encode() []byte {
	b := []byte{summaryVersion}
	str := func(v string) {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	strs := func(vs []string) {
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			str(v)
		}
	}
	str(p.title)
	strs(p.types)
	for _, names := range p.names {
		strs(names)
	}
	str(p.search)
	secured := byte(0)
	if p.secured {
		secured = 1
	}
	b = append(b, secured)
	b = binary.AppendUvarint(b, uint64(len(p.bloom)))
	for _, w := range p.bloom {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	return b
}

// summaryScratch are Decode's buffers.
type summaryScratch struct{ search, buf []byte }

var decodeScratch = sync.Pool{New: func() any { return new(summaryScratch) }}

// errSummary reports a stored summary that cannot be used.
var errSummary = errors.New("unusable stored summary")

// Decode decodes what Encode wrote: it checks the encoding once and keeps
// it as one string, which the Summary reads on demand, with the search
// fields' words coded by ix's dictionary and without their length. It
// refuses (with an error) an encoding of another version or a damaged one;
// b is not kept.
func (ix *Index) Decode(b []byte) (Summary, error) {
	if len(b) < 2 || b[0] != summaryVersion || uint64(len(b)-1) > math.MaxUint32 {
		return Summary{}, errSummary
	}
	// Decoding allocates what the Summary keeps and nothing else: b is
	// checked and read in place, and the search fields are coded in
	// pooled buffers. Start-up decodes 10k summaries in a row; transient
	// copies of the same sizes as the kept strings, interleaved with
	// them, left the heap's spans half used (~2 MB more RSS than live
	// heap).
	stored := b[1:]
	l, ok := locate(stored)
	if !ok {
		return Summary{}, errSummary
	}
	sc := decodeScratch.Get().(*summaryScratch)
	defer decodeScratch.Put(sc)
	sc.search = sc.search[:0]
	eachFieldIn(stored[l.searchAt:l.searchEnd], func(kind byte, a, c int, text []byte) {
		sc.buf = ix.dict.compress(sc.buf[:0], text)
		sc.search = appendField(sc.search, kind, a, c, sc.buf)
	})
	// One allocation, of the exact size: the stored bytes up to the
	// search fields' length, the coded fields, and the rest.
	rest := stored[l.searchEnd:]
	var enc strings.Builder
	enc.Grow(l.lenAt + len(sc.search) + len(rest))
	enc.Write(stored[:l.lenAt])
	enc.Write(sc.search)
	enc.Write(rest)
	s := Summary{enc: enc.String(), namesAt: l.namesAt}
	s.Title = s.enc[l.titleAt : l.titleAt+l.titleLen]
	s.searchAt, s.searchEnd = uint32(l.lenAt), uint32(l.lenAt+len(sc.search))
	s.bloomAt = s.searchEnd + (l.bloomAt - l.searchEnd)
	return s, nil
}

// layout locates the parts of a stored summary (after its version byte).
type layout struct {
	titleAt, titleLen int
	namesAt           [3]uint32
	// lenAt is where the search fields' length is; the fields are
	// [searchAt, searchEnd), the Bloom filter's bytes from bloomAt to the
	// end.
	lenAt                        int
	searchAt, searchEnd, bloomAt uint32
}

// locate checks all, a stored summary after its version byte, and returns
// where its parts are.
func locate(all []byte) (l layout, ok bool) {
	p := 0
	num := func() (int, bool) {
		v, w := binary.Uvarint(all[p:])
		if w <= 0 || v > uint64(len(all)) {
			return 0, false
		}
		p += w
		return int(v), true
	}
	str := func() ([]byte, bool) {
		n, ok := num()
		if !ok || n > len(all)-p {
			return nil, false
		}
		p += n
		return all[p-n : p], true
	}
	// strs checks a list; sorted requires strictly increasing strings
	// (HasAffordance stops early on that).
	strs := func(sorted bool) (int, bool) {
		n, ok := num()
		if !ok || n > len(all)-p {
			return 0, false
		}
		var prev []byte
		for i := range n {
			v, ok := str()
			if !ok || sorted && i > 0 && bytes.Compare(v, prev) <= 0 {
				return 0, false
			}
			prev = v
		}
		return n, true
	}
	title, ok := str()
	if !ok {
		return layout{}, false
	}
	// The Summary locates its types from the title's length alone, which
	// must then be in its shortest form.
	l.titleLen = len(title)
	l.titleAt = p - len(title)
	if l.titleAt != uvarintLen(uint64(len(title))) {
		return layout{}, false
	}
	if _, ok = strs(false); !ok {
		return layout{}, false
	}
	var counts [3]int
	for k := range l.namesAt {
		l.namesAt[k] = uint32(p)
		if counts[k], ok = strs(true); !ok {
			return layout{}, false
		}
	}
	l.lenAt = p
	search, ok := str()
	if !ok {
		return layout{}, false
	}
	l.searchAt, l.searchEnd = uint32(p-len(search)), uint32(p)
	if p >= len(all) || all[p] > 1 {
		return layout{}, false
	}
	p++
	words, ok := num()
	if !ok || words*8 != len(all)-p || words&(words-1) != 0 {
		return layout{}, false
	}
	l.bloomAt = uint32(p)
	// The search fields are read without checks (eachFieldIn): check once.
	return l, validSearchFields(search, counts)
}

// validSearchFields checks that the search fields b decode and point at
// affordances and kinds that exist (counts are the name lists' lengths).
func validSearchFields(b []byte, counts [3]int) bool {
	for len(b) > 0 {
		kind := b[0]
		if int(kind) >= len(fieldWeights) {
			return false
		}
		b = b[1:]
		var n [3]uint64
		for i := range n {
			v, w := binary.Uvarint(b)
			if w <= 0 {
				return false
			}
			n[i], b = v, b[w:]
		}
		if n[2] > uint64(len(b)) {
			return false
		}
		b = b[n[2]:]
		switch kind {
		case fieldAffordanceName, fieldAffordanceTitle, fieldAffordanceDescription:
			if n[0] >= 3 || n[1] >= uint64(counts[n[0]]) {
				return false
			}
		}
	}
	return true
}

// eachFieldIn calls fn with every search field of b (a Summary's, words
// coded; or a stored one's, plain): its kind, the two numbers that locate
// it and its text. b was checked (validSearchFields).
func eachFieldIn[T string | []byte](b T, fn func(kind byte, a, c int, text T)) {
	for len(b) > 0 {
		kind := b[0]
		b = b[1:]
		var n [3]uint64
		for i := range n {
			v, w := uvarint(b)
			n[i], b = v, b[w:]
		}
		text := b[:n[2]]
		b = b[n[2]:]
		fn(kind, int(n[0]), int(n[1]), text)
	}
}

// uvarint reads a checked uvarint from s (binary.Uvarint for either kind
// of bytes).
func uvarint[T string | []byte](s T) (uint64, int) {
	var v uint64
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		c := s[i]
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return v, len(s) // cannot happen: the encoding was checked
}

// appendField appends one search field: kind, the two numbers that locate
// it, and its text.
func appendField(b []byte, kind byte, a, c int, text []byte) []byte {
	b = append(b, kind)
	b = binary.AppendUvarint(b, uint64(a))
	b = binary.AppendUvarint(b, uint64(c))
	b = binary.AppendUvarint(b, uint64(len(text)))
	return append(b, text...)
}
