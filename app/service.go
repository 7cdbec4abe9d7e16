package app

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/eclipse-lmos/lmos-hub/internal/memlimit"
)

// limitMemory gives the Go runtime a soft memory limit when GOMEMLIMIT
// sets none: memlimit.Percent of the machine's memory or of the cgroup's
// memory.max, whichever is smaller.
func (m *Main) limitMemory() {
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		m.Logger.Info("memory limit", "from", "GOMEMLIMIT", "limit", v)
		return
	}
	limit, from, err := memlimit.System.Limit()
	if err != nil {
		m.Logger.Warn("no memory limit", "err", err)
		return
	}
	debug.SetMemoryLimit(limit)
	m.Logger.Info("memory limit", "from", from, "limit_mib", limit>>20, "percent", memlimit.Percent)
}

// notifyService tells systemd the hub serves (Type=notify) and, when the
// unit sets WatchdogSec=, pings the watchdog every half interval while the
// store, registry and broker are healthy: a hub that hangs or breaks is
// restarted. Outside systemd (no NOTIFY_SOCKET) it does nothing.
func (m *Main) notifyService() {
	status := "READY=1\nSTATUS=serving"
	if m.HTTPAddr != nil {
		status += " on " + m.HTTPAddr.String()
	}
	sent, err := daemon.SdNotify(false, status)
	if err != nil {
		m.Logger.Warn("cannot tell systemd the hub is ready", "err", err)
		return
	}
	if !sent {
		return
	}
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		m.Logger.Warn("ignoring the systemd watchdog", "err", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if interval > 0 {
		ticker := time.NewTicker(interval / 2)
		go func() {
			defer close(done)
			defer ticker.Stop()
			ping := func() error { _, err := daemon.SdNotify(false, daemon.SdNotifyWatchdog); return err }
			watchdog(ctx, ticker.C, m.healthy, ping, m.Logger.With("component", "systemd"))
		}()
	} else {
		close(done)
	}
	m.onClose("systemd", func(context.Context) error {
		cancel()
		<-done
		_, err := daemon.SdNotify(false, daemon.SdNotifyStopping)
		return err
	})
}

// healthy is nil while the components the watchdog vouches for are up;
// mDNS is not one: the hub serves without it.
func (m *Main) healthy() error {
	return errors.Join(m.DB.Ping(), m.Registry.Err(), m.Broker.Err())
}

// watchdog pings on every tick while healthy says so, until ctx ends.
func watchdog(ctx context.Context, tick <-chan time.Time, healthy, ping func() error, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		if err := healthy(); err != nil {
			logger.Warn("not pinging the systemd watchdog: the hub is unhealthy", "err", err)
			continue
		}
		if err := ping(); err != nil {
			logger.Warn("cannot ping the systemd watchdog", "err", err)
		}
	}
}
