package packaging

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkDistSizes reports the size of each binary make dist builds and
// of each .deb make deb builds (DESIGN: ≤ 15 MB for linux/arm64, the
// dashboard included), in MB (10^6 bytes).
func BenchmarkDistSizes(b *testing.B) {
	dir := built(b)
	for b.Loop() {
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range ents {
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil || fi.IsDir() {
			continue
		}
		name := strings.TrimPrefix(e.Name(), "lmos-hub-linux-")
		if strings.HasSuffix(name, ".deb") {
			name = "deb-" + strings.TrimSuffix(name[strings.LastIndex(name, "_")+1:], ".deb")
		}
		b.ReportMetric(float64(fi.Size())/1e6, "MB-"+name)
	}
}
