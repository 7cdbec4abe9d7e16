package lmos

import "strings"

// Media types of interaction payloads (PROTOCOL §4.2) and of the problem
// document (RFC 9457).
const (
	MediaJSON    = "application/json"
	MediaCBOR    = "application/cbor"
	MediaProblem = "application/problem+json"
	// MediaTD is a Thing Description; MediaLDJSON its JSON-LD form, which
	// the directory also serves.
	MediaTD     = "application/td+json"
	MediaLDJSON = "application/ld+json"
)

// MediaType returns the media type of a Content-Type without its
// parameters, lower-case; "" when absent.
func MediaType(contentType string) string {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

// MediaOf reduces a Content-Type to the payload encoding it stands for:
// MediaCBOR for application/cbor (and +cbor suffixes), MediaJSON for
// everything else, absent included (PROTOCOL §4.2).
func MediaOf(contentType string) string {
	if mt := MediaType(contentType); mt == MediaCBOR || strings.HasSuffix(mt, "+cbor") {
		return MediaCBOR
	}
	return MediaJSON
}
