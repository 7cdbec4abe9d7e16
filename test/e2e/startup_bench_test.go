package e2e

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkStartupBinary10k: the real binary started on a data dir of
// 10k TDs until GET /healthz answers 200, natively and as the linux/arm64
// build under qemu-aarch64-static (Debian qemu-user-static; a Pi's figure
// is nearer the native one on its own cores than qemu's emulation on
// these). Reports the median over the starts of -benchtime.
func BenchmarkStartupBinary10k(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	dir := b.TempDir()
	fillDir(b, dir)
	native := buildTool(b, lmosHubPkg, "lmos-hub")
	b.Run("native", func(b *testing.B) { startupRuns(b, dir, native) })
	b.Run("arm64-qemu", func(b *testing.B) {
		qemu, err := exec.LookPath("qemu-aarch64-static")
		if err != nil {
			b.Skip("qemu-aarch64-static not installed (Debian qemu-user-static)")
		}
		bin := filepath.Join(b.TempDir(), "lmos-hub-arm64")
		build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, lmosHubPkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("cannot build for arm64: %v\n%s", err, out)
		}
		startupRuns(b, dir, qemu, bin)
	})
}

// startupRuns starts argv (the hub binary, perhaps behind qemu) on dir
// once per iteration and times each start to its first /healthz 200.
func startupRuns(b *testing.B, dir string, argv ...string) {
	c := benchClient(b)
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		cmd := exec.Command(argv[0], append(argv[1:], "serve", "--data-dir", dir, "--http-addr", "127.0.0.1:0",
			"--mqtt-addr", "127.0.0.1:0", "--mdns=false", "--admin-token", testToken, "--log-format", "json")...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + b.TempDir()}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		base := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				var l struct{ Msg, Addr string }
				if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "http listening" {
					base <- "http://" + strings.Replace(l.Addr, "[::]", "127.0.0.1", 1)
				}
			}
		}()
		var u string
		select {
		case u = <-base:
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			b.Fatal("the hub did not log its HTTP address within 2 minutes")
		}
		for fetch(c, http.MethodGet, u+"/healthz", nil, http.StatusOK) != nil {
			if time.Since(start) > 2*time.Minute {
				_ = cmd.Process.Kill()
				b.Fatal("no /healthz 200 within 2 minutes")
			}
			time.Sleep(2 * time.Millisecond)
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		c.CloseIdleConnections()
		b.StartTimer()
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/float64(time.Millisecond), "p50-ms-to-healthz")
}
