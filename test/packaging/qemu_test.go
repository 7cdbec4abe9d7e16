package packaging

import (
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestArm64UnderQemu runs make dist's arm64 binary under qemu-user: version
// prints the stamped version, and serve on loopback answers /healthz (its
// address read from the READY=1 it sends) and stops on SIGTERM.
func TestArm64UnderQemu(t *testing.T) {
	qemu := need(t, "qemu-aarch64-static", "qemu-user-static")
	bin := filepath.Join(built(t), "lmos-hub-linux-arm64")
	out, err := exec.Command(qemu, bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), version) {
		t.Fatalf("version under qemu: %v\n%s", err, out)
	}

	sock, msgs := notifySocket(t)
	cmd := exec.Command(qemu, bin, "serve", "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0", "--mdns=false")
	cmd.Env = []string{"NOTIFY_SOCKET=" + sock, "PATH=/usr/bin:/bin"}
	stderr, exited := startProc(t, cmd)
	ready := next(t, msgs, "READY=1")
	addr, ok := strings.CutPrefix(strings.TrimPrefix(ready, "READY=1\n"), "STATUS=serving on ")
	if !ok {
		t.Fatalf("notification %q, want READY=1 and the HTTP address", ready)
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("/healthz: %v\n%s", err, stderr.String())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"status":"up"`) {
		t.Errorf("/healthz under qemu: %s %s", resp.Status, body)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the hub under qemu did not exit within 90s of SIGTERM")
	}
}

// TestArmBuildsOnPiZeroCPU runs the two 32-bit ARM builds on the CPU of a
// Pi Zero/1 (qemu's arm1176, ARMv6 with VFPv2): the armv6 build (the armhf
// .deb) runs, the armv7 one (armhf-armv7) dies, which is why the armhf
// .deb is the one for Raspberry Pi OS 32-bit.
func TestArmBuildsOnPiZeroCPU(t *testing.T) {
	qemu := need(t, "qemu-arm-static", "qemu-user-static")
	dir := built(t)
	out, err := exec.Command(qemu, "-cpu", "arm1176", filepath.Join(dir, "lmos-hub-linux-armv6"), "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), version) {
		t.Errorf("armv6 build on arm1176: %v\n%s", err, out)
	}
	// qemu may dump a core where it runs: in a temp dir, not the tree.
	dies := exec.Command(qemu, "-cpu", "arm1176", filepath.Join(dir, "lmos-hub-linux-armv7"), "version")
	dies.Dir = t.TempDir()
	out, err = dies.CombinedOutput()
	// It dies before main: "Illegal instruction" (what a Pi Zero owner
	// sees) or the Go runtime's "no VFPv3" refusal.
	if err == nil || strings.Contains(string(out), version) {
		t.Errorf("armv7 build on arm1176 ran (want it to die at once): %v\n%s", err, out)
	} else {
		t.Logf("armv7 build on arm1176: %v %s", err, out)
	}
	out, err = exec.Command(qemu, "-cpu", "cortex-a7", filepath.Join(dir, "lmos-hub-linux-armv7"), "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), version) {
		t.Errorf("armv7 build on cortex-a7: %v\n%s", err, out)
	}
}
