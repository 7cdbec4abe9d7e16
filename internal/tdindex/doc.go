// Package tdindex is the registry's search index over Thing Descriptions.
//
// The registry keeps a compact Summary of each document instead of the
// document: the facts read on every request (title, @type, affordance
// names), a Bloom filter of every member name and string value, and the
// lower-cased fields capability search ranks. This package makes summaries
// (Index.Summarize), encodes them for the store and reads them back
// (Index.Encode, Index.Decode), ranks them against the words of a text
// search (Index.Matcher) and tells a JSONPath query which documents it can
// skip unparsed (NewPrefilter).
//
// An Index owns the word dictionary that codes the summaries' search fields
// in memory: a Summary is read through the Index that made or decoded it,
// never through another. The stored encoding holds plain text, so any Index
// decodes it. The package knows nothing of the hub; each registry owns one
// Index.
package tdindex
