// A Go pipeline with map and set user state, run on beam-kafka by
// itests/test_go_map_state.py (Python has neither kind of state). Each
// element of a key touches its key's map and set through every operation
// the Go SDK has (Put, Get, Remove, Clear, Keys; Add, Contains, Keys) and
// writes one line saying what it saw; the test checks the lines.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"

	// The beamkafka runner, and beam-kafka's options as flags.
	_ "beamkafka.dev/go/beamkafka"
)

var (
	output = flag.String("output", "", "File the pipeline appends its lines to.")
	words  = flag.String("words", "apple,pear,peach,apple,apple,pear", "Comma-separated input words.")
)

// countFn keeps, per word, a map of counters and a set of the counts seen.
type countFn struct {
	Counters state.Map[string, int64]
	Seen     state.Set[string]
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func (f *countFn) ProcessElement(sp state.Provider, word string, _ int64) string {
	n, _, err := f.Counters.Get(sp, "count")
	must(err)
	n++
	must(f.Counters.Put(sp, "count", n))
	must(f.Counters.Put(sp, fmt.Sprintf("at%d", n), n))
	must(f.Seen.Add(sp, fmt.Sprintf("s%d", n)))
	switch n {
	case 2:
		// Remove drops one key; the earlier one must be gone.
		must(f.Counters.Remove(sp, "at1"))
		if _, ok, _ := f.Counters.Get(sp, "at1"); ok {
			panic("at1 survived its Remove")
		}
	case 3:
		// Clear drops every key; only what is put afterwards remains.
		must(f.Counters.Clear(sp))
		must(f.Counters.Put(sp, "count", n))
	}
	keys, _, err := f.Counters.Keys(sp)
	must(err)
	sort.Strings(keys)
	seen, _, err := f.Seen.Keys(sp)
	must(err)
	sort.Strings(seen)
	has1, err := f.Seen.Contains(sp, "s1")
	must(err)
	return fmt.Sprintf("%s n=%d keys=%s seen=%s has_s1=%v", word, n, strings.Join(keys, ","), strings.Join(seen, ","), has1)
}

func toKV(w string) (string, int64) { return w, 1 }

var mu sync.Mutex

// writeLine appends a line to the output file (the SDK worker runs in this
// process: LOOPBACK).
func writeLine(line string) {
	mu.Lock()
	defer mu.Unlock()
	f, err := os.OpenFile(*output, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	must(err)
	defer f.Close()
	_, err = f.WriteString(line + "\n")
	must(err)
}

func init() {
	register.DoFn3x1[state.Provider, string, int64, string](&countFn{})
	register.Function1x2[string, string, int64](toKV)
	register.Function1x0[string](writeLine)
}

func main() {
	flag.Parse()
	beam.Init()
	if *output == "" {
		log.Fatal("--output is required")
	}
	p, s := beam.NewPipelineWithRoot()
	in := beam.Create(s, toAny(strings.Split(*words, ","))...)
	kvs := beam.ParDo(s, toKV, in)
	lines := beam.ParDo(s, &countFn{
		Counters: state.MakeMapState[string, int64]("counters"),
		Seen:     state.MakeSetState[string]("seen"),
	}, kvs)
	beam.ParDo0(s, writeLine, lines)
	if err := beamx.Run(context.Background(), p); err != nil {
		log.Fatalf("pipeline failed: %v", err)
	}
}

func toAny(ws []string) []any {
	out := make([]any, len(ws))
	for i, w := range ws {
		out[i] = w
	}
	return out
}
