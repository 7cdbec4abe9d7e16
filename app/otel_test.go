package app

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDefaultBinaryCarriesNoTracing: the OpenTelemetry exporter (megabytes
// a Pi binary must not carry) is linked only into a binary built with the
// otel tag; with it, the tag's build says it can trace.
func TestDefaultBinaryCarriesNoTracing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, tags := range []string{"", "otel"} {
		out, err := exec.Command("go", "list", "-tags", tags, "-deps", "github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub").CombinedOutput()
		if err != nil {
			t.Fatalf("go list -tags %q: %v\n%s", tags, err, out)
		}
		has := strings.Contains(string(out), "go.opentelemetry.io/otel/sdk/trace")
		if has != (tags == "otel") {
			t.Errorf("go list -tags %q -deps ./cmd/lmos-hub: OpenTelemetry SDK linked %v", tags, has)
		}
	}
}
