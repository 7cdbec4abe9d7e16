package proof

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/percentile"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// grownTD is the generated thermostat TD with more properties until it is
// at least size bytes: a large real device (many data points).
func grownTD(b *testing.B, size int) []byte {
	b.Helper()
	var doc map[string]any
	if err := json.Unmarshal(tdgen.Generate(1)[0].Raw, &doc); err != nil {
		b.Fatal(err)
	}
	props := doc["properties"].(map[string]any)
	var tmpl any
	for _, p := range props {
		tmpl = p
	}
	for i := 0; ; i++ {
		raw, err := json.Marshal(doc)
		if err != nil {
			b.Fatal(err)
		}
		if len(raw) >= size {
			return raw
		}
		props[fmt.Sprintf("point%04d", i)] = tmpl
	}
}

// BenchmarkVerifyTD is the cost of checking one signed TD's proof
// (proof.Verify: parse, JCS of the document and the proof, SHA-256,
// Ed25519), for the sample TDs, a generated one, and ~10 KB and ~200 KB
// ones; p50/p99 in µs per verification.
func BenchmarkVerifyTD(b *testing.B) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	samples, err := tdgen.Samples(filepath.Join(vectorDir(b), "..", "tds"))
	if err != nil {
		b.Fatal(err)
	}
	type doc struct {
		name string
		raw  []byte
	}
	var docs []doc
	for name, raw := range samples {
		if name[:len("invalid")] != "invalid" {
			docs = append(docs, doc{name, raw})
		}
	}
	sort.Slice(docs, func(i, j int) bool { return docs[i].name < docs[j].name })
	docs = append(docs, doc{"generated", tdgen.Generate(1)[0].Raw}, doc{"10KB", grownTD(b, 10<<10)}, doc{"200KB", grownTD(b, 200<<10)})
	for _, d := range docs {
		signed, err := Sign(d.raw, priv, time.Now())
		if err != nil {
			b.Fatalf("%s: %v", d.name, err)
		}
		b.Run(fmt.Sprintf("%s-%dB", d.name, len(signed)), func(b *testing.B) {
			b.SetBytes(int64(len(signed)))
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				if _, err := Verify(signed); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			percentile.Report(b, lat, time.Microsecond, "µs")
		})
	}
}
