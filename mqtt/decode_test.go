package mqtt

import "bytes"

// Hostile CBOR payloads; a description's are decoded by the hub
// (hub.Admission.PrepareJoin, tested there).

// cborBomb is n nested one-element arrays.
func cborBomb(n int) []byte {
	return append(bytes.Repeat([]byte{0x81}, n), 0x00)
}

// cborHugeMap declares a map of n pairs but carries none: the decoder must
// refuse it from the header, not allocate for it.
func cborHugeMap(n uint32) []byte {
	return []byte{0xba, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
}
