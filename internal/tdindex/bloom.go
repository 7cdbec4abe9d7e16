package tdindex

import "slices"

// The Bloom filter holds every member name and string value of a document,
// so a JSONPath query that needs a given string (an equality with a string
// literal, a member name) can skip documents without parsing them. Sizing:
// at least 10 bits per string with 7 probes gives about 1 % false
// positives, so a selective query parses about 1 % of the registry; small
// filters get 256 bits, where a few strings would otherwise leave the rate
// to chance.
const bloomProbes = 7

// newBloom returns the filter of doc as 64-bit words (stored little-endian,
// so bit i is byte i/8, bit i%8).
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
