package tdindex

// Index makes and reads the summaries of one registry. It holds their word
// dictionary, which only grows (up to maxWordCodes words) and never
// reassigns a code, so a summary made at any time stays readable. An Index
// is safe for concurrent use and must not be copied.
type Index struct {
	dict wordDict
}

// New returns an Index with an empty dictionary.
func New() *Index { return new(Index) }
