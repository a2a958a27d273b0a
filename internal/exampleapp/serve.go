package exampleapp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Main is an example command's main: it calls run with the command line's
// arguments and standard error for the logs, cancels run's context on
// SIGINT or SIGTERM, and exits 1 with the error run returns. run's ready
// is nil; tests call run themselves to be told the address.
func Main(run func(ctx context.Context, args []string, logOut io.Writer, ready func(addr string)) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr, nil)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

// ShutdownGrace bounds how long a stopping server waits for requests in
// flight.
const ShutdownGrace = 10 * time.Second

// Serve listens on addr and serves h until ctx is done, then shuts down
// gracefully, giving requests in flight up to ShutdownGrace. ready, if not
// nil, is told the address listened on (tests listen on port 0). The
// "listening" log line carries attrs (slog key-value pairs or Attrs) after
// the address.
func Serve(ctx context.Context, addr string, h http.Handler, logger *slog.Logger, ready func(addr string), attrs ...any) error {
	srv := &http.Server{
		Handler: h,
		// Bounded reads and writes: a slow client cannot hold a
		// connection, and so a goroutine, forever.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	logger.Info("listening", append([]any{slog.String("addr", ln.Addr().String())}, attrs...)...)
	if ready != nil {
		ready(ln.Addr().String())
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down", slog.String("grace", ShutdownGrace.String()))
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	logger.Info("stopped")
	return nil
}
