// Package jsonx holds the hub's JSON utilities that know nothing of Thing
// Descriptions: one byte-level scanner (whitespace, strings, values, the
// members of an object, compaction), the checks that run on raw documents
// before they are decoded (duplicate member names, nesting depth), JSON
// pointers (RFC 6901), one equality and one number reader for the JSON data
// model as encoding/json (with UseNumber) and the CBOR decoder produce it,
// and the RFC 7396 merge patch.
//
// The scanners assume nothing about their input beyond what each function
// says; hostile input is normal input, so none of them recurses without a
// bound the caller controls or allocates more than the input's size.
package jsonx
