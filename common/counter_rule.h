// The rule by which the counters (NetworkCounters, docs/counters.md)
// are counted, as a number. Every result record carries it
// ("counter_rule"), tools/compare.py writes it into each recording, and the
// docs check (maint/docs_diff.py) shows no counters of a recording made
// under an older rule and fails a page that quotes one: a learner's run
// prints today's counts, which an older recording may not match.
//
// Raise it whenever what a counter counts changes, and add a line here.
//   1  2026-11-23 (acb6378)  the first counters: a doorbell for every post
//                            without FI_MORE, refused ones included
//   2  2026-11-25 (19f82de)  doorbells only for posts the provider took
//                            (doorbells == post_calls - eagain until 18)
//   3  2026-11-25 (b610995)  longest_write_run: the most WRITEs handed one
//                            NIC between two reads of its CQ
#pragma once

namespace tutorial {

inline constexpr int kCounterRule = 3;

}  // namespace tutorial
