// Command apiget is the test image's in-cluster client: it GETs a path of the
// API server the way a pod's client library logs in (KUBERNETES_SERVICE_HOST
// and _PORT, the ServiceAccount token, the CA the kubelet mounted beside it)
// and prints the status code and the body. Busybox's wget cannot do this: its
// own TLS has no cipher suite in common with the API server's ECDSA key.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

const serviceAccount = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: apiget /api/path")
		os.Exit(2)
	}
	token, err := os.ReadFile(serviceAccount + "/token")
	check(err)
	ca, err := os.ReadFile(serviceAccount + "/ca.crt")
	check(err)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		check(fmt.Errorf("no certificate in %s/ca.crt", serviceAccount))
	}
	client := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	server := net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	request, err := http.NewRequest(http.MethodGet, "https://"+server+os.Args[1], nil)
	check(err)
	request.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	response, err := client.Do(request)
	check(err)
	defer response.Body.Close()
	body, err := io.ReadAll(response.Body)
	check(err)
	fmt.Printf("%d\n%s\n", response.StatusCode, body)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "apiget:", err)
		os.Exit(1)
	}
}
