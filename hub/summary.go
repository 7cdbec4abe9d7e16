package hub

import (
	"encoding/binary"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
)

// Summary is what the registry keeps in memory about a Thing's document
// instead of the document itself: the few facts read on every request
// (title, types, affordance names), a Bloom filter of every member name
// and string value (to skip documents a JSONPath query cannot select), and
// the lower-cased fields capability search ranks. A parsed 2.4 KB TD costs
// about 12 KB of heap as a map tree; its Summary about 1 KB. The document
// itself stays in the store and is parsed when a request needs it.
type Summary struct {
	Title string
	// Types are the @type values.
	Types []string
	// names are the sorted affordance names: properties, actions, events.
	names [3][]string
	bloom []uint64
	// search holds the searchable fields, lower-cased (see addField).
	search string
	// schemas holds the affordances' compiled data schemas (checkInput).
	schemas *dataSchemas
	// Secured is set when the TD requires a security scheme other than
	// nosec: only authenticated consumers interact with it (access.go).
	Secured bool
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

// Affordances returns the sorted names of the Thing's properties, actions
// or events (member is the TD member name); nil for any other member.
func (s *Summary) Affordances(member string) []string {
	k := kindOf(member)
	if s == nil || k < 0 {
		return nil
	}
	return s.names[k]
}

// HasAffordance reports whether the TD member ("properties", "actions",
// "events") has an affordance called name.
func (s *Summary) HasAffordance(member, name string) bool {
	_, ok := slices.BinarySearch(s.Affordances(member), name)
	return ok
}

// summarize builds the Summary of a valid document.
func summarize(doc map[string]any) *Summary {
	s := &Summary{schemas: &dataSchemas{}}
	s.Title, _ = doc["title"].(string)
	switch v := doc["@type"].(type) {
	case string:
		s.Types = []string{v}
	case []any:
		for _, e := range v {
			if str, ok := e.(string); ok {
				s.Types = append(s.Types, str)
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
		s.names[k] = names
	}
	s.bloom = newBloom(doc)
	s.search = searchFields(doc, s)
	s.Secured = securedTD(doc)
	return s
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
	nbits := uint32(len(s.bloom) * 64)
	if nbits == 0 {
		return true
	}
	for i := range uint32(bloomProbes) {
		bit := (k.h1 + i*k.h2) & (nbits - 1)
		if s.bloom[bit/64]&(1<<(bit%64)) == 0 {
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

func searchFields(doc map[string]any, s *Summary) string {
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
	add(fieldTitle, 0, 0, s.Title)
	add(fieldDescription, 0, 0, str(doc["description"]))
	for k, member := range affordanceMembers {
		affs, _ := doc[member].(map[string]any)
		for i, name := range s.names[k] {
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
// and lower-cased text.
func (s *Summary) eachField(fn func(kind byte, a, c int, text string)) {
	b := s.search
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
		p := "/" + affordanceMembers[a] + "/" + jsonx.EscapePointer(s.names[a][c])
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
	str(s.Title)
	strs(s.Types)
	for _, names := range s.names {
		strs(names)
	}
	str(s.search)
	secured := byte(0)
	if s.Secured {
		secured = 1
	}
	b = append(b, secured)
	b = binary.AppendUvarint(b, uint64(len(s.bloom)))
	for _, w := range s.bloom {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	return b
}

// errSummary reports a stored summary that cannot be used.
var errSummary = errors.New("unusable stored summary")

// DecodeSummary decodes what EncodeSummary wrote. Its strings share one
// allocation, which keeps a registry of small strings compact.
func DecodeSummary(b []byte) (*Summary, error) {
	if len(b) == 0 || b[0] != summaryVersion {
		return nil, errSummary
	}
	all := string(b[1:])
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
	strs := func() ([]string, bool) {
		n, ok := num()
		if !ok || n > len(all)-p {
			return nil, false
		}
		if n == 0 {
			return nil, true
		}
		out := make([]string, n)
		for i := range out {
			if out[i], ok = str(); !ok {
				return nil, false
			}
		}
		return out, true
	}
	s := &Summary{schemas: &dataSchemas{}}
	ok := true
	s.Title, ok = str()
	if ok {
		s.Types, ok = strs()
	}
	for k := range s.names {
		if ok {
			s.names[k], ok = strs()
		}
	}
	if ok {
		s.search, ok = str()
	}
	if ok && p < len(all) && all[p] <= 1 {
		s.Secured = all[p] == 1
		p++
	} else {
		ok = false
	}
	var words int
	if ok {
		words, ok = num()
	}
	if !ok || words*8 != len(all)-p || words&(words-1) != 0 {
		return nil, errSummary
	}
	if words > 0 {
		s.bloom = make([]uint64, words)
		for i := range s.bloom {
			s.bloom[i] = binary.LittleEndian.Uint64([]byte(all[p+8*i : p+8*i+8]))
		}
	}
	// The search fields are read without checks (eachField): check once.
	if !validSearchFields(s) {
		return nil, errSummary
	}
	return s, nil
}

// validSearchFields checks that the search fields decode and point at
// affordances and kinds that exist.
func validSearchFields(s *Summary) bool {
	b := s.search
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
			if n[0] >= 3 || n[1] >= uint64(len(s.names[n[0]])) {
				return false
			}
		}
	}
	return true
}
