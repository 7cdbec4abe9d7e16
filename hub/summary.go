package hub

import (
	"sync/atomic"

	"github.com/eclipse-lmos/lmos-hub/internal/tdindex"
)

// Summary is what the registry keeps in memory about one version of a
// Thing's document instead of the document: the search index's summary
// (title, @type, affordance names, what search reads; internal/tdindex)
// and the affordances' data schemas, compiled on first use (checkInput):
// most Things never check an input. The document itself stays in the
// store and is parsed when a request needs it.
type Summary struct {
	tdindex.Summary
	schemas atomic.Pointer[dataSchemas]
}

// schemaCache returns the Thing's compiled data schemas, made on first use.
func (s *Summary) schemaCache() *dataSchemas {
	if c := s.schemas.Load(); c != nil {
		return c
	}
	s.schemas.CompareAndSwap(nil, &dataSchemas{})
	return s.schemas.Load()
}

// summarize builds the Summary of a valid document with the registry's
// index, and its encoding for the store.
func (r *Registry) summarize(doc map[string]any) (*Summary, []byte) {
	s, enc := r.searchIndex.Summarize(doc, securedTD(doc))
	return &Summary{Summary: s}, enc
}

// decodeSummary reads a stored summary back; an error when it is of
// another version or damaged (the document is then summarised again).
func (r *Registry) decodeSummary(b []byte) (*Summary, error) {
	s, err := r.searchIndex.Decode(b)
	if err != nil {
		return nil, err
	}
	return &Summary{Summary: s}, nil
}
