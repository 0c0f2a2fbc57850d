// Command admission-floor answers pod AdmissionReviews at the least cost any mutating webhook can have, so that
// bench/admission_bench.py can measure the floor of one webhook call on a pod create.
//
// It decodes the review only as far as request.uid, and answers `allowed` with a JSONPatch given once at start
// (the operations our webhook returns for the bench's pod, computed by the bench from the pure mutation); the
// validating path answers `allowed` with no patch. TLS with the certificate it is given; HTTP/1.1 keep-alive
// unless -http2. A plain-HTTP listener serves /readyz and /metrics (reviews answered, and the handling time as a
// histogram in the admission component's metric names, so the bench reads both processes alike).
package main

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var buckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

type histogram struct {
	mu     sync.Mutex
	counts []uint64 // per bucket, not cumulative; the last one is +Inf
	sum    float64
}

func (h *histogram) observe(seconds float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := 0
	for i < len(buckets) && seconds > buckets[i] {
		i++
	}
	h.counts[i]++
	h.sum += seconds
}

func (h *histogram) write(w io.Writer, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fmt.Fprintf(w, "# TYPE %s histogram\n", name)
	var total uint64
	for i, le := range buckets {
		total += h.counts[i]
		fmt.Fprintf(w, "%s_bucket{le=\"%g\"} %d\n", name, le, total)
	}
	total += h.counts[len(buckets)]
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", name, total, name, h.sum, name, total)
}

type review struct {
	Request struct {
		UID string `json:"uid"`
	} `json:"request"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9443", "the webhook's TLS listen address")
	metrics := flag.String("metrics", "127.0.0.1:9080", "plain-HTTP address of /readyz and /metrics")
	cert := flag.String("cert", "tls.crt", "serving certificate (PEM)")
	key := flag.String("key", "tls.key", "its private key (PEM)")
	patchFile := flag.String("patch", "", "file holding the JSON patch the mutating path returns")
	http2 := flag.Bool("http2", false, "offer HTTP/2 (ALPN h2) besides HTTP/1.1")
	flag.Parse()

	patch, err := os.ReadFile(*patchFile)
	if err != nil {
		log.Fatal(err)
	}
	// The answer around the uid, built once: the uid is the only part that differs between reviews.
	head := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"`)
	mutateTail := []byte(`","allowed":true,"status":{"code":200},"patchType":"JSONPatch","patch":"` +
		base64.StdEncoding.EncodeToString([]byte(strings.TrimSpace(string(patch)))) + `"}}`)
	validateTail := []byte(`","allowed":true,"status":{"code":200}}}`)

	var answered [2]atomic.Uint64 // mutate, validate
	hist := &histogram{counts: make([]uint64, len(buckets)+1)}
	handler := func(tail []byte, counter *atomic.Uint64) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			begin := time.Now()
			body, err := io.ReadAll(r.Body)
			var in review
			if err == nil {
				err = json.Unmarshal(body, &in)
			}
			if err != nil || in.Request.UID == "" || strings.ContainsAny(in.Request.UID, `"\`) {
				http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
				return
			}
			out := make([]byte, 0, len(head)+len(in.Request.UID)+len(tail))
			out = append(append(append(out, head...), in.Request.UID...), tail...)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(out)
			counter.Add(1)
			hist.observe(time.Since(begin).Seconds())
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate--v1-pod", handler(mutateTail, &answered[0]))
	mux.HandleFunc("/validate--v1-pod", handler(validateTail, &answered[1]))
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		log.Fatal(err)
	}
	server := &http.Server{Addr: *addr, Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}},
		IdleTimeout: 5 * time.Minute}
	if !*http2 {
		// A non-nil empty map turns off the server's automatic HTTP/2 (ALPN h2): the API server then keeps
		// HTTP/1.1 keep-alive connections, as it does with the Python webhook.
		server.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}

	plain := http.NewServeMux()
	plain.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	plain.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# TYPE kai_admission_requests_total counter\n")
		fmt.Fprintf(w, "kai_admission_requests_total{webhook=\"mutate\"} %d\n", answered[0].Load())
		fmt.Fprintf(w, "kai_admission_requests_total{webhook=\"validate\"} %d\n", answered[1].Load())
		hist.write(w, "kai_webhook_review_duration_seconds")
	})
	go func() { log.Fatal(http.ListenAndServe(*metrics, plain)) }()
	log.Fatal(server.ListenAndServeTLS("", ""))
}
