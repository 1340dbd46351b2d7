package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"go.uber.org/zap"
)

// servePprof serves Go's profiler endpoints (/debug/pprof/) on addr, which
// must be a loopback address: profiles reveal the program's internals and
// cost CPU, so they are for an operator on the machine (floodbench
// --profile uses them). It logs {"msg":"pprof","addr":...} with the bound
// address; the returned func stops it.
func servePprof(addr string, log *zap.Logger) (func(), error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%s is not a loopback address", addr)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(lis)
	log.Info("pprof", zap.String("addr", lis.Addr().String()))
	return func() { srv.Close() }, nil
}
