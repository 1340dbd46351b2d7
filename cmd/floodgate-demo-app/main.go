// Command floodgate-demo-app is the application `make try-nginx`, `try-haproxy` and `try-caddy` put
// behind a proxy: it answers every request 200 with what reached it (method, URI, headers), so that
// a recipe tried by hand shows what the proxy passed on, the failure mode's marker among it.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"sort"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "host:port to serve on")
	flag.Parse()
	srv := &http.Server{
		Addr:              *listen,
		ReadHeaderTimeout: 10 * time.Second,
		Handler:           http.HandlerFunc(answer),
	}
	log.Printf("floodgate-demo-app: serving on %s", *listen)
	log.Fatal(srv.ListenAndServe())
}

// answer writes the request back as text.
func answer(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "the application got %s %s\n", r.Method, r.RequestURI)
	names := make([]string, 0, len(r.Header))
	for k := range r.Header {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		for _, v := range r.Header[k] {
			fmt.Fprintf(w, "  %s: %q\n", k, v)
		}
	}
}
