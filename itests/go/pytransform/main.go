// A Go pipeline with a Python transform in it: Beam's Go SDK expands Python's
// Count.PerElement through a Python expansion service
// (apache_beam.runners.portability.expansion_service_main), and the job runs
// Go and Python harnesses side by side. Writes "word count" lines.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/reflectx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/xlang/python"

	// The beamkafka runner, and beam-kafka's options as flags.
	_ "beamkafka.dev/go/beamkafka"
)

var (
	output    = flag.String("output", "", "File the pipeline appends its lines to.")
	words     = flag.String("words", "a,b,a", "Comma-separated input words.")
	expansion = flag.String("python_expansion_addr", "", "The Python expansion service (host:port).")
)

// noArgs is the (empty) argument list of the Python constructor.
type noArgs struct{}

var mu sync.Mutex

func writeCount(word string, n int64) {
	mu.Lock()
	defer mu.Unlock()
	f, err := os.OpenFile(*output, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s %d\n", word, n); err != nil {
		panic(err)
	}
}

func init() {
	register.Function2x0[string, int64](writeCount)
}

func main() {
	flag.Parse()
	beam.Init()
	if *output == "" || *expansion == "" {
		log.Fatal("--output and --python_expansion_addr are required")
	}
	p, s := beam.NewPipelineWithRoot()
	var in []any
	for _, w := range strings.Split(*words, ",") {
		in = append(in, w)
	}
	col := beam.Create(s, in...)
	count := python.NewExternalTransform[noArgs, noArgs]("apache_beam.transforms.combiners.Count.PerElement")
	outT := beam.UnnamedOutput(typex.NewKV(typex.New(reflectx.String), typex.New(reflectx.Int64)))
	counted := beam.CrossLanguage(s, "beam:transforms:python:fully_qualified_named", beam.CrossLanguagePayload(count),
		*expansion, beam.UnnamedInput(col), outT)
	beam.ParDo0(s, writeCount, counted[beam.UnnamedOutputTag()])
	if err := beamx.Run(context.Background(), p); err != nil {
		log.Fatalf("pipeline failed: %v", err)
	}
}
