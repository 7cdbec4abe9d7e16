package hub

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
)

// Summary is what the registry keeps in memory about a Thing's document
// instead of the document itself: the few facts read on every request
// (title, types, affordance names), a Bloom filter of every member name
// and string value (to skip documents a JSONPath query cannot select), and
// the lower-cased fields capability search ranks. A parsed 2.4 KB TD costs
// about 12 KB of heap as a map tree. The document itself stays in the
// store and is parsed when a request needs it.
//
// All of it is kept in one string, the summary's stored encoding
// (EncodeSummary), and read from there on demand: a Summary is two
// allocations, the string and this struct. Decoded into slices (types,
// names, the filter's words) it cost 10k TDs ~2.3 MB more in slice
// headers, small arrays and a second copy of the filter
// (docs/PERFORMANCE.md, issue 16).
type Summary struct {
	// Title is the TD's title (a part of enc).
	Title string
	// enc is the encoding after its version byte. DecodeSummary checked
	// it, so the readers below walk it without checks.
	enc string
	// Offsets into enc: the affordance name lists (properties, actions,
	// events; each sorted), the search fields and the Bloom filter's bytes
	// (to the end; the little-endian words the store holds, so bit i is
	// byte i/8, bit i%8). The @type list follows the title (typesAt).
	namesAt             [3]uint32
	searchAt, searchEnd uint32
	bloomAt             uint32
	// schemas holds the affordances' compiled data schemas (checkInput),
	// made on first use: most Things never check an input.
	schemas atomic.Pointer[dataSchemas]
}

// Affordance kinds, in Summary.names order.
const (
	kindProperties = iota
	kindActions
	kindEvents
)

var affordanceMembers = [3]string{"properties", "actions", "events"}

func kindOf(member string) int {
	return slices.Index(affordanceMembers[:], member)
}

// Secured reports whether the TD requires a security scheme other than
// nosec: only authenticated consumers interact with it (access.go). The
// flag is the byte after the search fields.
func (s *Summary) Secured() bool { return s.enc[s.searchEnd] == 1 }

// Types returns the @type values.
func (s *Summary) Types() []string { return s.list(s.typesAt()) }

// typesAt is the offset of the @type list: after the title and its
// length (DecodeSummary keeps that length in its shortest form).
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

// hasType reports whether the Thing has the @type want, compared without
// case and without an "lmos:" prefix ("Agent" matches "lmos:Agent").
func (s *Summary) hasType(want string) bool {
	norm := func(s string) string { return strings.ToLower(strings.TrimPrefix(s, "lmos:")) }
	w := norm(want)
	found := false
	s.eachString(s.typesAt(), func(_ int, t string) bool {
		found = norm(t) == w
		return !found
	})
	return found
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
	// The names are sorted (DecodeSummary checked): stop at the first
	// one past name.
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

// schemaCache returns the Thing's compiled data schemas, made on first use.
func (s *Summary) schemaCache() *dataSchemas {
	if c := s.schemas.Load(); c != nil {
		return c
	}
	s.schemas.CompareAndSwap(nil, &dataSchemas{})
	return s.schemas.Load()
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

// summarize builds the Summary of a valid document.
func summarize(doc map[string]any) *Summary {
	s, _ := summarizeEncoded(doc)
	return s
}

// summarizeEncoded builds the Summary of a valid document and its
// encoding for the store.
func summarizeEncoded(doc map[string]any) (*Summary, []byte) {
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
	p.secured = securedTD(doc)
	enc := p.encode()
	s, err := DecodeSummary(enc)
	if err != nil {
		panic("hub: a summary does not decode: " + err.Error()) // a bug in this file
	}
	return s, enc
}

// The Bloom filter holds every member name and string value of a document,
// so a JSONPath query that needs a given string (an equality with a string
// literal, a member name) can skip documents without parsing them. Sizing:
// at least 10 bits per string with 7 probes gives about 1 % false
// positives, so a selective query parses about 1 % of the registry; small
// filters get 256 bits, where a few strings would otherwise leave the rate
// to chance.
const bloomProbes = 7

func newBloom(doc map[string]any) []uint64 {
	var strs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			strs = append(strs, v)
		case map[string]any:
			for k, e := range v {
				strs = append(strs, k)
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	slices.Sort(strs)
	strs = slices.Compact(strs)
	nbits := 256
	for nbits < len(strs)*10 {
		nbits <<= 1
	}
	b := make([]uint64, nbits/64)
	for _, s := range strs {
		k := keyOf(s)
		for i := range uint32(bloomProbes) {
			bit := (k.h1 + i*k.h2) & uint32(nbits-1)
			b[bit/64] |= 1 << (bit % 64)
		}
	}
	return b
}

// bloomKey is a string's two hashes; probe i is h1 + i·h2.
type bloomKey struct{ h1, h2 uint32 }

// keyOf hashes s with 64-bit FNV-1a and a final mix (splitmix64's), the
// same in every process: filters are stored with the summaries and read
// back after a restart, so a per-process seed (hash/maphash) would make
// every stored filter miss.
func keyOf(s string) bloomKey {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return bloomKey{uint32(h), uint32(h>>32) | 1} // odd: every probe differs
}

// mayContain reports whether the document may have str as a member name
// or string value; false is certain.
func (s *Summary) mayContain(str string) bool { return s.mayHave(keyOf(str)) }

func (s *Summary) mayHave(k bloomKey) bool {
	bloom := s.enc[s.bloomAt:]
	nbits := uint32(len(bloom) * 8)
	if nbits == 0 {
		return true
	}
	for i := range uint32(bloomProbes) {
		bit := (k.h1 + i*k.h2) & (nbits - 1)
		if bloom[bit/8]&(1<<(bit%8)) == 0 {
			return false
		}
	}
	return true
}

// Searchable field kinds. A field is stored as its kind, the numbers that
// locate it (affordance kind and index into names, capability index,
// example index), and its lower-cased text; the JSON pointer is rebuilt
// only for fields that match.
const (
	fieldTitle = iota
	fieldDescription
	fieldAffordanceName
	fieldAffordanceTitle
	fieldAffordanceDescription
	fieldCapabilityName
	fieldCapabilityID
	fieldCapabilityDescription
	fieldCapabilityExample
)

var fieldWeights = [...]float64{
	fieldTitle:                 weightTitle,
	fieldDescription:           weightDescription,
	fieldAffordanceName:        weightAffordanceName,
	fieldAffordanceTitle:       weightAffordanceText,
	fieldAffordanceDescription: weightAffordanceText,
	fieldCapabilityName:        weightCapability,
	fieldCapabilityID:          weightCapabilityText,
	fieldCapabilityDescription: weightCapabilityText,
	fieldCapabilityExample:     weightCapabilityText,
}

func searchFields(doc map[string]any, title string, names *[3][]string) string {
	var b []byte
	add := func(kind byte, a, c int, text string) {
		if text == "" {
			return
		}
		text = strings.ToLower(text)
		b = append(b, kind)
		b = binary.AppendUvarint(b, uint64(a))
		b = binary.AppendUvarint(b, uint64(c))
		b = binary.AppendUvarint(b, uint64(len(text)))
		b = append(b, text...)
	}
	str := func(v any) string { s, _ := v.(string); return s }
	add(fieldTitle, 0, 0, title)
	add(fieldDescription, 0, 0, str(doc["description"]))
	for k, member := range affordanceMembers {
		affs, _ := doc[member].(map[string]any)
		for i, name := range names[k] {
			add(fieldAffordanceName, k, i, splitCamel(name))
			if m, ok := affs[name].(map[string]any); ok {
				add(fieldAffordanceTitle, k, i, str(m["title"]))
				add(fieldAffordanceDescription, k, i, str(m["description"]))
			}
		}
	}
	caps, _ := doc["lmos:capabilities"].([]any)
	for i, c := range caps {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		add(fieldCapabilityName, i, 0, str(m["name"]))
		add(fieldCapabilityID, i, 0, str(m["id"]))
		add(fieldCapabilityDescription, i, 0, str(m["description"]))
		ex, _ := m["examples"].([]any)
		for j, e := range ex {
			add(fieldCapabilityExample, i, j, str(e))
		}
	}
	return string(b)
}

// eachField calls fn with every searchable field of s: its kind, location
// and lower-cased text, expanded into *buf (text is valid only during the
// call; *buf is reused from call to call).
func (s *Summary) eachField(buf *[]byte, fn func(kind byte, a, c int, text []byte)) {
	s.eachRawField(func(kind byte, a, c int, coded string) {
		*buf = expandText((*buf)[:0], coded)
		fn(kind, a, c, *buf)
	})
}

// eachRawField calls fn with every searchable field of s as it is kept
// (in a Summary: its words coded, words.go; in a stored one: plain).
func (s *Summary) eachRawField(fn func(kind byte, a, c int, coded string)) {
	b := s.enc[s.searchAt:s.searchEnd]
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

func uvarint(s string) (uint64, int) {
	var v uint64
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		c := s[i]
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return v, len(s) // cannot happen: searchFields wrote it
}

// fieldPointer is the JSON pointer of a searchable field.
func (s *Summary) fieldPointer(kind byte, a, c int) string {
	switch kind {
	case fieldTitle:
		return "/title"
	case fieldDescription:
		return "/description"
	case fieldAffordanceName, fieldAffordanceTitle, fieldAffordanceDescription:
		p := "/" + affordanceMembers[a] + "/" + jsonx.EscapePointer(s.nameAt(a, c))
		switch kind {
		case fieldAffordanceTitle:
			p += "/title"
		case fieldAffordanceDescription:
			p += "/description"
		}
		return p
	}
	p := "/lmos:capabilities/" + strconv.Itoa(a)
	switch kind {
	case fieldCapabilityName:
		return p + "/name"
	case fieldCapabilityID:
		return p + "/id"
	case fieldCapabilityDescription:
		return p + "/description"
	}
	return p + "/examples/" + strconv.Itoa(c)
}

// summaryVersion tags encoded summaries. A stored summary of another
// version is ignored and rebuilt from the document, so changing what a
// Summary holds only needs a new version here.
const summaryVersion = 3 // 2: Bloom filters hashed the same in every process; 3: Secured

// EncodeSummary encodes s for the store, which keeps it next to the
// Thing's metadata so that start-up rebuilds the registry without parsing
// (or even reading) the documents.
func EncodeSummary(s *Summary) []byte {
	var search, buf []byte
	s.eachField(&buf, func(kind byte, a, c int, text []byte) {
		search = appendField(search, kind, a, c, text)
	})
	b := append([]byte{summaryVersion}, s.enc[:s.searchAt]...)
	b = binary.AppendUvarint(b, uint64(len(search)))
	b = append(b, search...)
	return append(b, s.enc[s.searchEnd:]...)
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

// summaryScratch are DecodeSummary's buffers.
type summaryScratch struct{ search, buf []byte }

var decodeScratch = sync.Pool{New: func() any { return new(summaryScratch) }}

// errSummary reports a stored summary that cannot be used.
var errSummary = errors.New("unusable stored summary")

// DecodeSummary decodes what EncodeSummary wrote: it checks the encoding
// once and keeps it as one string, which the Summary reads on demand, with
// the search fields' words coded (words.go) and without their length.
func DecodeSummary(b []byte) (*Summary, error) {
	if len(b) < 2 || b[0] != summaryVersion || uint64(len(b)-1) > math.MaxUint32 {
		return nil, errSummary
	}
	// Decoding allocates what the Summary keeps and nothing else: read b
	// through a view, not a copy, and code the search fields in pooled
	// buffers. Start-up decodes 10k summaries in a row; transient copies
	// of the same sizes as the kept strings, interleaved with them, left
	// the heap's spans half used (~2 MB more RSS than live heap).
	// Nothing of the view outlives this call.
	var plain Summary
	plain.enc = unsafe.String(&b[1], len(b)-1)
	lenAt, ok := plain.locate()
	// Title and types are located from the title's length alone, which
	// must then be in its shortest form.
	var nb [binary.MaxVarintLen64]byte
	n := binary.AppendUvarint(nb[:0], uint64(len(plain.Title)))
	ok = ok && len(plain.enc) >= len(n) && plain.enc[:len(n)] == string(n)
	typesAt := len(n) + len(plain.Title)
	if !ok {
		return nil, errSummary
	}
	sc := decodeScratch.Get().(*summaryScratch)
	defer decodeScratch.Put(sc)
	sc.search = sc.search[:0]
	plain.eachRawField(func(kind byte, a, c int, text string) {
		sc.buf = compressText(sc.buf[:0], text)
		sc.search = appendField(sc.search, kind, a, c, sc.buf)
	})
	search := len(sc.search)
	s := &Summary{namesAt: plain.namesAt}
	// One allocation, of the exact size.
	var enc strings.Builder
	rest := plain.enc[plain.searchEnd:]
	enc.Grow(lenAt + search + len(rest))
	enc.WriteString(plain.enc[:lenAt])
	enc.Write(sc.search)
	enc.WriteString(rest)
	s.enc = enc.String()
	s.Title = s.enc[int(typesAt)-len(plain.Title) : typesAt]
	s.searchAt, s.searchEnd = uint32(lenAt), uint32(lenAt+search)
	s.bloomAt = s.searchEnd + (plain.bloomAt - plain.searchEnd)
	return s, nil
}

// locate checks s.enc, a stored summary after its version byte, and sets
// the offsets into it; lenAt is where the search fields' length is.
func (s *Summary) locate() (lenAt int, ok bool) {
	all := s.enc
	p := 0
	num := func() (int, bool) {
		v, w := binary.Uvarint([]byte(all[p:min(len(all), p+binary.MaxVarintLen64)]))
		if w <= 0 || v > uint64(len(all)) {
			return 0, false
		}
		p += w
		return int(v), true
	}
	str := func() (string, bool) {
		n, ok := num()
		if !ok || n > len(all)-p {
			return "", false
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
		prev := ""
		for i := range n {
			v, ok := str()
			if !ok || sorted && i > 0 && v <= prev {
				return 0, false
			}
			prev = v
		}
		return n, true
	}
	if s.Title, ok = str(); !ok {
		return 0, false
	}
	if _, ok = strs(false); !ok {
		return 0, false
	}
	var counts [3]int
	for k := range s.namesAt {
		s.namesAt[k] = uint32(p)
		if counts[k], ok = strs(true); !ok {
			return 0, false
		}
	}
	lenAt = p
	search, ok := str()
	if !ok {
		return 0, false
	}
	s.searchAt, s.searchEnd = uint32(p-len(search)), uint32(p)
	if p >= len(all) || all[p] > 1 {
		return 0, false
	}
	p++
	words, ok := num()
	if !ok || words*8 != len(all)-p || words&(words-1) != 0 {
		return 0, false
	}
	s.bloomAt = uint32(p)
	// The search fields are read without checks (eachField): check once.
	return lenAt, validSearchFields(search, counts)
}

// validSearchFields checks that the search fields b decode and point at
// affordances and kinds that exist (counts are the name lists' lengths).
func validSearchFields(b string, counts [3]int) bool {
	for len(b) > 0 {
		kind := b[0]
		if int(kind) >= len(fieldWeights) {
			return false
		}
		b = b[1:]
		var n [3]uint64
		for i := range n {
			v, w := binary.Uvarint([]byte(b[:min(len(b), binary.MaxVarintLen64)]))
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
