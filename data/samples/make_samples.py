#!/usr/bin/env python3
"""Generate the mindflow sample inbox under data/samples/.

Standard library only and fully deterministic (fixed seed, fixed dates), so
re-running it rewrites byte-identical files:

    python3 data/samples/make_samples.py

Two beings:
  ada  - coding assistant for Lena on "ledgerline", a payments reconciliation service
  bram - personal companion for Tomas (half marathon, Portuguese, Porto wedding,
         Miso the cat, a job change, sleep)

Some lines are broken on purpose (see README.md, which this script also writes
with the exact line numbers).
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
INBOX = HERE / "inbox"
SEED = 20261012

HEARTBEAT_PROBE = (
    "Read HEARTBEAT.md if it exists (workspace context). Follow it strictly. "
    "If nothing needs attention, reply HEARTBEAT_OK."
)


def U(text, **meta):
    return ("user", text, meta)


def A(text, **meta):
    return ("assistant", text, meta)


# Planted bad lines, placed inside a session's turn list.
def BAD(kind, **extra):
    return ("bad", kind, extra)


def HB():
    """A heartbeat probe + HEARTBEAT_OK pair inside a session."""
    return ("heartbeat", None, {})


# ---------------------------------------------------------------------------
# ada: coding assistant for Lena, project ledgerline
# ---------------------------------------------------------------------------

ADA_SESSIONS = [
    {
        "sid": "ada-s01", "start": "2026-10-12T08:42:10", "tags": ["ledgerline", "auth"],
        "turns": [
            U("Morning. Today I want the ledgerline login to use OAuth with PKCE instead of the client secret we hardcoded."),
            A("Good call. For a public client PKCE is the right fit. Is the finance team on Keycloak or Auth0?"),
            U("Keycloak 24, self-hosted by the platform team. The realm is called ledger-prod.", kind="fact", imp=0.6),
            A("Then we need a code_verifier of 43 to 128 characters and an S256 challenge. I'd use secrets.token_urlsafe(64) and hashlib.sha256."),
            U("Where does the verifier live between the redirect and the callback? We don't have server sessions yet."),
            A("In a signed HttpOnly cookie with a five-minute max age. It never needs to reach JavaScript, and the state parameter can ride along.", kind="decision", imp=0.7, tags=["auth", "security"]),
            U("OK, write the helper. Module ledgerline/auth/pkce.py, and keep it free of FastAPI imports.", kind="task"),
            A("Done: make_verifier(), challenge_for(verifier) and a small PkcePair dataclass. Four unit tests, including the RFC 7636 appendix B vector."),
            U("The RFC vector passes? I never trust those examples until I see them green."),
            A("It passes: the appendix verifier produces exactly the E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM challenge from the RFC."),
            U("Nice. Now the callback. Keycloak keeps answering invalid_grant on the token exchange."),
            A("Most common cause is a redirect_uri mismatch between the authorize and token calls. Is there a trailing slash in one of them?"),
            U("Ugh, yes. Authorize used /auth/callback and the token request /auth/callback/. Fixed, the token comes back now.", kind="event", imp=0.5),
            A("Good. I'd also pin ID token validation to RS256 so a misconfigured realm can't downgrade us to alg none."),
            U("Add that, and log the kid of the signing key at debug level so we can see key rotations."),
            A("Added. The JWKS is cached for ten minutes and refetched once on an unknown kid before the login fails."),
            U("Let's call the login flow done for today. I'll open the PR tomorrow after standup.", kind="task", imp=0.4),
            A("Sounds good. I left a TODO about refresh token rotation; Keycloak has it disabled in the realm for now."),
        ],
    },
    {
        "sid": "ada-s02", "start": "2026-10-13T09:47:31", "tags": ["ledgerline", "auth"],
        "turns": [
            U("Standup ran long again. Three people argued about sprint points for twenty minutes.", kind="emotion", tags=["team"]),
            A("That sounds draining. Want me to draft the PKCE PR description while you get a coffee?"),
            U("Yes please. Mention the trailing slash bug, future me will forget it."),
            A("Draft ready: summary, the redirect_uri gotcha, test vector coverage, and a note that refresh rotation is still off."),
            U("Marco asked whether the cookie is SameSite Lax or Strict. What did we set?"),
            A("Lax. Strict would drop the cookie on the top-level redirect back from Keycloak, and the callback would lose its verifier.", kind="fact", imp=0.6, tags=["auth", "security"]),
            U("Right, that makes sense. I'll paste your explanation into the PR thread."),
            U("Unrelated, but my back is killing me. I think the new desk chair was a mistake.", kind="emotion", tags=["health", "private"]),
            A("Sorry to hear that. Raising the monitor and a short walk every hour often helps. I could nudge you around lunch."),
            U("Don't nudge me, I hate reminders during focus time. Only mention it if I'm still here after seven.", kind="preference", imp=0.8, tags=["private", "work-style"]),
            A("Understood, no reminders during focus time. I'll only bring it up if we're still working after 19:00."),
            U("Also my daughter has her school play on Thursday evening, so I'm leaving at four that day.", kind="event", imp=0.5, tags=["family", "private"]),
            A("Noted, Thursday the 15th you're out from 16:00. I'll keep anything long-running off that afternoon."),
            U("Back to code. CI fails on the pkce tests, but only on the Python 3.12 runner."),
            A("One test compares bytes with str after stripping the base64 padding; 3.12 is just the first runner to hit it. Both sides are str now."),
            U("Green now. I'll merge after Marco approves."),
            A("Great. I'll watch the staging deploy and tell you if the login smoke test fails."),
            U("Staging login works with my own account. Good day, thanks."),
        ],
    },
    {
        "sid": "ada-s03", "start": "2026-10-15T08:05:12", "tags": ["ledgerline", "migration", "postgres"],
        "turns": [
            U("Migration 0042_split_settlements failed again in CI. Third time this week, and it passes locally.", kind="event", imp=0.6),
            A("Can you paste the error? If it's a lock timeout, the ALTER TABLE on settlements is probably competing with the seed job."),
            U("canceling statement due to lock timeout, while running ALTER TABLE settlements ADD COLUMN batch_id."),
            A("That matches. In CI the fixture loader runs in a parallel container and holds a ROW EXCLUSIVE lock on settlements for a few seconds."),
            U("Can we just bump lock_timeout to a minute and move on?"),
            A("We could, but in production that would block writes for up to a minute during the deploy. Better to avoid the heavy lock."),
            U("How? Adding a nullable column should be cheap."),
            BAD("broken_json"),
            A("The column is cheap, but 0042 also adds a validated foreign key. Add it NOT VALID first, then VALIDATE CONSTRAINT in a second step."),
            U("OK, do that. Split 0042 into 0042a and 0042b and keep both idempotent.", kind="decision", imp=0.8, tags=["migration", "postgres"]),
            A("Done. 0042a adds the column and the NOT VALID key; 0042b validates it and only takes a SHARE UPDATE EXCLUSIVE lock."),
            U("CI is still red, but now with a different error: relation settlement_batches does not exist."),
            A("Ordering issue. 0041 and 0042a both declare down_revision 0040, so alembic has two heads and picks either order."),
            U("Who created two heads? Never mind, probably me."),
            A("It happens with parallel branches. I merged the heads with an empty revision and added a CI check that fails on more than one head.", kind="decision", imp=0.6),
            U("Good idea, that check should have existed a year ago."),
            A("CI is green on three reruns in a row. I'd still watch it tomorrow before calling it fixed; flaky things like to come back."),
            U("Agreed. I'm leaving at four for the school play, so let's stop here."),
            A("Enjoy the play! I'll post a summary of the migration state in the channel so Marco knows what changed."),
        ],
    },
    {
        "sid": "ada-s04", "start": "2026-10-16T08:31:40", "tags": ["ledgerline", "migration"],
        "turns": [
            U("Migration check: five green runs overnight. I think we're done with 0042.", kind="event", imp=0.5),
            A("Good news. Staging applied both steps too; 0042b took 41 seconds validating three million settlement rows."),
            U("The play was lovely, by the way. My daughter forgot one line and improvised something funnier than the script.", kind="emotion", tags=["family", "private"], imp=0.4),
            A("That's wonderful. Improvising on stage at that age takes real nerve."),
            U("Let's reflect on how the migration went. What should we do differently next time?", tags=["migration", "retro"]),
            A("Three things: we assumed CI locks like production, two alembic heads went unnoticed for days, and we reached for a bigger timeout first."),
            U("And I ran the migration on my laptop against an empty database and called it tested.", kind="correction"),
            A("Yes. A staging snapshot with realistic volume would have shown the 41-second validation early. Worth a checklist item."),
            U("Write it into docs/migrations.md as a checklist. Short, five items at most.", kind="task", imp=0.5),
            A("Added: one head only, NOT VALID for new foreign keys, no ALTER on hot tables during seeding, test on a staging snapshot, note the lock level in the PR."),
            U("Please remember that our deploy window is Thursdays after 14:00. Ops won't approve anything earlier in the week without a ticket.", kind="fact", imp=0.9, tags=["deploy", "ops"]),
            A("Got it: deploys happen on Thursdays after 14:00, anything else needs an ops ticket. I'll flag plans that conflict with that."),
            U("Also, Marco is out next week, so Priya will do the reviews.", kind="fact", imp=0.4, tags=["team"]),
            A("Noted, Priya reviews while Marco is away. Should I tag her on the open PRs already?"),
            U("Yes, tag her on the two migration PRs."),
            A("Tagged. I left a short context comment on each so she doesn't have to read the whole thread."),
        ],
    },
    {
        "sid": "ada-s05", "start": "2026-10-19T07:58:02", "tags": ["ledgerline", "importer", "csv"],
        "turns": [
            U("New task from finance: import the Nordbank statement CSVs into ledgerline every morning.", kind="task", imp=0.7),
            A("Do you have a sample file? Bank CSVs love surprises in delimiters, encodings and decimal commas."),
            U("Sample is in fixtures/nordbank_2026-10-16.csv. Semicolon separated, decimal comma, Latin-1. Of course."),
            A("I'll use csv.reader with delimiter ';' and decode as cp1252 rather than latin-1, since the euro sign appears as byte 0x80."),
            U("Good catch, I hadn't noticed the euro sign. What about the amount column?"),
            A("Amounts go into Decimal after removing the thousands dot and swapping the decimal comma. Never float for money."),
            U("Obviously. What happens to rows we can't parse?"),
            A("I'd collect them in a rejects file next to the import log, with line number and reason, and keep importing the rest."),
            U("Yes, but if more than five percent of rows fail, abort the whole import and alert.", kind="decision", imp=0.8, tags=["importer"]),
            A("Implemented as IMPORT_MAX_REJECT_RATIO = 0.05 in settings, so finance can tune it without a deploy."),
            U("Duplicates? Nordbank sometimes resends the previous day in the same file."),
            A("Each row gets a natural key from account, booking date, amount and bank reference. Known keys are skipped and counted."),
            U("Two rows in the sample have an empty bank reference though."),
            A("For those I fall back to a hash of the raw line. It's weaker, but only about 0.3 percent of rows need it."),
            U("Fine. How fast is it on the big file, the one with 400k rows?"),
            A("About 11 seconds with executemany in batches of 2,000. COPY would be faster but complicates the reject handling."),
            U("Eleven seconds is fine for a morning job. Keep executemany.", kind="decision", imp=0.5),
            A("Kept. Tests cover the semicolon format, the euro byte, duplicates, empty references and the five percent abort."),
            U("Ship it to staging. I'll ask Jonas in finance to try it with last week's real files.", kind="task"),
        ],
    },
    {
        "sid": "ada-s06", "start": "2026-10-21T10:12:55", "tags": ["ledgerline", "reporting"],
        "turns": [
            U("Finance wants monthly reporting dashboards. I'm tempted to run the heavy queries straight on Postgres."),
            A("The reconciliation tables are already busy during the morning import. Large aggregations there would compete with it."),
            U("Someone suggested DuckDB reading Parquet exports. Sensible for us, or just hype?"),
            A("For read-only monthly reports it fits: export nightly to Parquet, and DuckDB scans it in-process, with no new server to run."),
            U("What about freshness? Finance sometimes wants today's numbers."),
            A("A nightly export gives yesterday's data. For same-day numbers we could keep one small Postgres view; most reports are month-end anyway."),
            U("The alternative was ClickHouse. The platform team offered to host it."),
            A("ClickHouse wins for many concurrent dashboard users. With four analysts and a handful of reports, its running cost is hard to justify."),
            U("OK. Decision: DuckDB over nightly Parquet exports for reporting, revisit if we ever pass 20 report users.", kind="decision", imp=0.9, tags=["reporting", "duckdb", "architecture"]),
            A("Recorded as ADR 0007 in docs/adr, with the ClickHouse option and the 20-user threshold as the revisit trigger."),
            HB(),
            U("How big will the Parquet files be?"),
            A("A month of settlements is about 180 MB as zstd Parquet, versus 1.4 GB in Postgres including indexes."),
            U("Surprisingly small. Start with the settlements and payouts tables only.", kind="decision", imp=0.5),
            A("Export job drafted: pyarrow writes month partitions, and a manifest lists them so DuckDB never globs stale files."),
            U("Off topic, but I'm taking the last week of November off. We're going hiking in the Dolomites.", kind="event", imp=0.6, tags=["vacation", "private"]),
            A("That sounds great. Should I mark 23 to 27 November as unavailable so I don't plan reviews for you?"),
            U("Yes. And if anyone asks, I'm unreachable, no laptop at all.", kind="preference", imp=0.7, tags=["vacation", "private"]),
            A("Noted: no laptop that week. I'll route questions to Marco or Priya."),
        ],
    },
    {
        "sid": "ada-s07", "start": "2026-10-23T09:20:18", "tags": ["ledgerline", "release"],
        "turns": [
            U("Bad news, product wants the CSV importer released today. On a Friday.", kind="event", imp=0.6),
            A("Our deploy window is Thursdays after 14:00, so this needs an ops ticket. Want me to draft it with the risk notes?"),
            U("Yes. Say the importer is behind a feature flag and off by default."),
            A("Ticket drafted: importer behind flag nordbank_import, off by default, rollback is flipping the flag, no schema changes."),
            U("Ops approved, but only if we're done before 15:00.", kind="fact", imp=0.5, tags=["release", "ops"]),
            A("Then let's freeze now. The release branch is cut from main at a3f19c2 and the full suite is running."),
            BAD("bad_ts"),
            U("How do the tests look so far?"),
            A("612 passed, 3 skipped, and one flaky: test_payout_rounding timed out once and passed on retry. Unrelated to the importer."),
            U("Open an issue for that flaky test, don't fix it today.", kind="task", imp=0.4),
            A("Opened issue 318, flaky test_payout_rounding under load, labelled tech-debt."),
            U("Good enough. Tag v1.14.0 and deploy it."),
            A("Tagged v1.14.0. The deploy finished at 13:52; health checks are green and the error rate is flat.", kind="event", imp=0.7, tags=["release"]),
            U("Enable the flag for Jonas's account only."),
            A("Flag enabled for jonas.k. His first import: 1,204 rows, 2 rejected for empty amounts, 31 duplicates skipped."),
            U("Two rejects for empty amounts is correct, those are pending card reservations.", kind="fact", imp=0.6, tags=["importer"]),
            A("Good to know. I'll add that to the importer docs so nobody treats those rejects as a bug."),
            U("Honestly I was nervous about this one. Friday releases make me feel sick.", kind="emotion", imp=0.5, tags=["private"]),
            A("That's understandable, and it went cleanly. The flag did its job; you could still switch it off from your phone."),
            U("I'm closing the laptop and going to the climbing gym. Have a good weekend."),
        ],
    },
    {
        "sid": "ada-s08", "start": "2026-10-26T09:03:47", "tags": ["ledgerline", "review"],
        "turns": [
            U("Priya left review comments on the DuckDB export PR. Can you go through them with me?"),
            A("Sure. Seven comments: four naming nits, two on error handling, and one asking why we don't use COPY TO from Postgres."),
            U("Start with the COPY question, that one is actually interesting."),
            A("COPY to CSV and converting would double the disk I/O and lose types. pyarrow on a server-side cursor keeps Decimal and timestamps."),
            U("Write that as a reply, but shorter. Priya likes short answers.", kind="preference", imp=0.4, tags=["team"]),
            A("Reply posted: pyarrow keeps numeric and timestamptz types, while COPY to CSV would lose them and double the I/O."),
            U("And the error handling comments?"),
            A("She's right on one: a failed manifest write leaves partial Parquet files. It now writes to a temp directory and renames atomically."),
            U("And what was the other error handling comment?"),
            A("She asked for retries on connection errors. I'd push back: the job is nightly and the scheduler already retries twice."),
            HB(),
            U("Agreed, push back on that one, but politely."),
            A("Done. I also renamed exp_dir to export_dir and fixed the other naming bits she flagged."),
            U("Correction to last week: the revisit threshold in the ADR should be 25 report users, not 20. Finance counts interns too.", kind="correction", imp=0.7, tags=["reporting", "duckdb"]),
            A("Updated ADR 0007 to 25 users, with a line noting that interns are counted."),
            U("Can you review my PR as well? The refactor of the reconciliation matcher."),
            A("Reviewed. The logic looks right, but match_by_reference now runs one query per row. On the 400k file that's 400k round trips."),
            U("Ouch. Can we batch those lookups somehow?"),
            A("Prefetch the references for the booking date window into a dict. On the fixture the matching step went from 38 seconds to 1.9."),
            U("Do it in my branch, I'll re-request review from Priya.", kind="task"),
            A("Pushed to lena/matcher-refactor, with the prefetch window explained in the commit message."),
        ],
    },
    {
        "sid": "ada-s09", "start": "2026-10-28T08:26:09", "tags": ["ledgerline"],
        "turns": [
            U("Jonas says the importer ran four days without a single surprise. Let's enable the flag for everyone.", kind="decision", imp=0.7, tags=["importer", "release"]),
            A("Great result. nordbank_import is now on for all finance accounts, with the morning run scheduled at 06:15."),
            U("Refresh tokens: the Keycloak admins finally enabled rotation. Can we handle it now?"),
            A("Yes. The handler stores each new refresh token and treats reuse of an old one as a reason to log the user out."),
            U("Test it with two tabs open, that's where these things break."),
            A("Good instinct. Two tabs refreshing at once caused one spurious logout, so the previous token now gets a 30-second grace period."),
            U("Is thirty seconds safe enough?"),
            A("It matches the grace Keycloak itself suggests. The window is small and still logged, so misuse would show up in the audit trail."),
            U("Fine. By the way, I might switch teams in January. Please keep that to yourself.", kind="fact", imp=0.8, tags=["career", "private"]),
            A("Of course, that stays between us. Would you like help preparing, or are you just thinking out loud?"),
            U("Just thinking out loud. The payments domain is starting to bore me a bit.", kind="emotion", imp=0.5, tags=["career", "private"]),
            A("Fair after three years on it. Maybe note which parts still interest you, like the matcher work, before deciding."),
            U("The matcher was fun, honestly. The CSV parsing was not."),
            A("Noted. Bank file formats are a special kind of tedium."),
            U("Last thing: my partner's birthday is on Saturday. Remind me on Friday to pick up the cake from Konditorei Weber.", kind="task", imp=0.6, tags=["family", "private"]),
            A("I'll remind you on Friday the 30th to collect the cake from Konditorei Weber."),
        ],
    },
]

# ---------------------------------------------------------------------------
# bram: personal companion for Tomas
# ---------------------------------------------------------------------------

BRAM_SESSIONS = [
    {
        "sid": "bram-s01", "start": "2026-10-12T18:15:44", "tags": ["running"],
        "turns": [
            U("Bram, I did it. I signed up for the Porto half marathon in March.", kind="decision", imp=0.9, tags=["running", "porto"]),
            A("That's big news, congratulations! Is this your first half, or have you run one before?"),
            U("First one. My longest run so far was 12 km last spring, and it hurt.", kind="fact", imp=0.4),
            A("Then we have about 22 weeks, which is plenty. Three runs a week to start: two easy, one a bit longer on the weekend."),
            U("Easy meaning how slow? I always end up racing my own watch."),
            A("Slow enough to talk in full sentences. For you that's probably around 6:30 per km right now, and it will feel embarrassingly slow."),
            U("Embarrassing is fine, nobody watches me along the canal at 7am."),
            A("Great. Let's say Tuesday and Thursday easy runs of 5 km, and 8 km on Sunday. Does that fit around work?"),
            U("Thursdays are bad, we have late meetings. Wednesday instead.", kind="preference", imp=0.5, tags=["running", "schedule"]),
            A("Switched: Tuesday and Wednesday easy, Sunday long. Back-to-back days are fine while the runs are short."),
            U("My left knee sometimes aches after hills. Should I worry?", kind="fact", imp=0.6, tags=["running", "health"]),
            A("Keep the first weeks flat and note when the ache shows up. If it lasts past a day or gets sharper, see a physio."),
            U("OK. I'll keep a little log in my notes app."),
            A("Or tell me after each run and I'll keep the log: distance, how it felt, and the knee."),
            U("Deal. First run tomorrow morning."),
            A("Enjoy it. Go slower than you think you need to."),
        ],
    },
    {
        "sid": "bram-s02", "start": "2026-10-14T20:02:13", "tags": ["portuguese"],
        "turns": [
            U("Obrigado pelo plano. Did I write that right?"),
            A("Perfect. Obrigado is right for you; your sister Inês would say obrigada. How is the Portuguese going?"),
            U("Slowly. I do the app every evening, but I can't understand anyone who speaks fast.", kind="emotion", tags=["portuguese", "learning"]),
            A("Apps are good for vocabulary and weaker for listening. Would you try a learner podcast, ten minutes a day, European Portuguese?"),
            U("It has to be European Portuguese. Her fiancé's family is all from Porto and they tease me about my Brazilian accent.", kind="preference", imp=0.6, tags=["portuguese"]),
            A("Then skip Brazilian material for now. Porto speakers swallow a lot of vowels, so listening matters more than grammar drills."),
            U("Teach me something useful for the wedding. How do I make a toast?"),
            A("A simple one: \"Aos noivos!\" means to the bride and groom. Everyone will raise their glass with you."),
            U("Aos noivos. I like it. What about \"I'm very happy for you\"?"),
            A("\"Estou muito feliz por vocês.\" Vocês, because you're speaking to both of them."),
            U("I keep mixing up ser and estar. Any trick?"),
            A("Rough rule: ser for what something is, estar for how it is right now. Sou alto, but estou cansado."),
            U("Estou cansado is very accurate today, haha."),
            A("Ha. Short lesson then. Maybe the podcast on your next run instead?"),
            U("Good idea, two birds. This morning's run was 5 km at 6:40, knee fine.", kind="event", imp=0.3, tags=["running"]),
            A("Logged: Wednesday the 14th, 5 km at 6:40 per km, knee fine. Nice and easy, exactly right."),
        ],
    },
    {
        "sid": "bram-s03", "start": "2026-10-17T11:40:26", "tags": ["wedding", "porto", "family"],
        "turns": [
            U("Inês sent the wedding details. 13 March in Porto, ceremony at a church in Foz, party at a quinta by the Douro.", kind="fact", imp=0.85, tags=["wedding", "porto", "family"]),
            A("Beautiful. And the half marathon is the next morning, on the 14th? That's quite a weekend."),
            U("Yes, I only realised yesterday. Wedding on Saturday, race on Sunday morning. Stupid or fine?"),
            A("Doable if you treat the race as a fun run and stop drinking early. Racing for a time after a Portuguese wedding would be brave."),
            U("Fun run it is. No time goal.", kind="decision", imp=0.7, tags=["running", "wedding"]),
            A("Noted: the Porto half is a fun run with no time goal, because of the wedding the day before."),
            U("She asked me to give a short speech. In Portuguese. I'm terrified.", kind="emotion", imp=0.6, tags=["wedding", "portuguese"]),
            A("That's a lovely honour, and being terrified is normal. Two minutes is enough; we can write it in English first and translate together."),
            HB(),
            U("I also need flights. Probably fly in on Thursday and back on Monday."),
            A("Berlin to Porto in March is cheap if booked early. Want me to remind you to check prices next Saturday?"),
            U("Yes, remind me next Saturday.", kind="task", imp=0.4),
            A("Will do: on Saturday the 24th, check Berlin to Porto flights for 11 to 15 March."),
            U("Inês also asked if I'm bringing someone. I'm not. That's a sore topic.", kind="emotion", tags=["private"]),
            A("Understood, I won't bring it up. You can simply tell her you're coming alone."),
            U("Thanks. Mum will be there too. She gets seasick, so no boat tour, whatever Inês plans.", kind="fact", imp=0.5, tags=["family"]),
            A("Good to keep in mind: no boat trips for your mum. A tram ride along the river would be a gentler option."),
        ],
    },
    {
        "sid": "bram-s04", "start": "2026-10-18T08:55:37", "tags": ["miso"],
        "turns": [
            U("Miso threw up twice this morning. She seems fine now but I'm worried.", kind="emotion", imp=0.5, tags=["miso", "health"]),
            A("Poor Miso. Is she eating and drinking normally now, and did she eat anything new yesterday?"),
            U("I gave her the chicken treats my neighbour brought over."),
            A("That could be it. If it happens again or she stops eating, call the vet. Keep the treats away for now."),
            BAD("missing_text"),
            U("I booked a vet appointment for Monday at 17:30 anyway.", kind="task", imp=0.5, tags=["miso", "vet"]),
            A("Good. Bring the treat packaging so the vet can check the ingredients."),
            U("Also, I did the long run a day early because tomorrow looks rainy: 8 km along the canal at 6:35, felt strong.", kind="event", imp=0.4, tags=["running"]),
            A("Logged: 8 km at 6:35 per km, felt strong. That's already your longest run this autumn."),
            U("Miso sat on my running shoes afterwards like she owned them."),
            A("She was probably trying to keep you home. Cats are very clear about priorities."),
        ],
    },
    {
        "sid": "bram-s05", "start": "2026-10-19T18:48:02", "tags": ["miso", "vet"],
        "turns": [
            U("The vet thinks Miso is most likely allergic to chicken. She needs a special diet for eight weeks.", kind="fact", imp=0.8, tags=["miso", "health"]),
            A("That explains the treats. How is she taking the new food?"),
            U("Sniffed it, looked at me like I had betrayed her, then ate all of it."),
            A("Classic cat. Eating it all is what counts."),
            U("Remember this: Miso is allergic to chicken. No chicken anything, including treats and wet food.", kind="fact", imp=0.95, tags=["miso", "health"]),
            A("Remembered: Miso is allergic to chicken, so no chicken food, treats or wet food. I'll help check labels whenever you ask."),
            BAD("bad_utf8"),
            A("That's about normal for a vet diet, sadly. One bag should last roughly five weeks for a cat her size."),
            U("Rest day today, but my left knee felt stiff on the stairs at work.", kind="fact", imp=0.5, tags=["running", "health"]),
            A("Logged the stiffness. Let's keep Tuesday and Wednesday flat and see whether it settles."),
        ],
    },
    {
        "sid": "bram-s06", "start": "2026-10-22T19:30:51", "tags": ["job", "career"],
        "turns": [
            U("Big work news. The fintech in Lisbon offered me the senior data engineer role.", kind="event", imp=0.85, tags=["job", "career"]),
            A("Congratulations! How do you feel about it, more excited or more nervous?"),
            U("Both. 18 percent more salary, fully remote, but the team sits in Lisbon and I'd fly there once a month.", kind="fact", imp=0.7, tags=["job"]),
            A("That's a solid offer. What's holding you back?"),
            U("My current team. I like them, and my manager Sabine has been really good to me.", kind="emotion", tags=["job"]),
            A("Leaving good people is the hardest part. A list of what you'd gain and lose, apart from money, might help."),
            U("Gain: streaming pipelines, a real data platform, Portuguese colleagues. Lose: Sabine, stability, my ancient but familiar Airflow setup."),
            A("The gains are about growth, the losses about comfort. Which matters more to you this year?"),
            U("Growth. I've been bored for a year.", kind="emotion", imp=0.6, tags=["job", "career"]),
            A("Then it sounds like you already know. Do you want to sleep on it before answering?"),
            U("Yes. They want an answer by Monday.", kind="task", imp=0.7, tags=["job"]),
            A("Noted: answer to the Lisbon offer due Monday the 26th. I'll ask on Sunday how you're leaning."),
            BAD("importance_17"),
            A("It probably will change a lot, and it's fine that it feels that big. You don't have to settle every detail tonight."),
            U("I also looked at a flat in Lisbon today, just in case. Alfama, tiny balcony, far too expensive.", kind="fact", imp=0.5, tags=["lisbon", "housing"]),
            A("Alfama is lovely but pricey, especially for a place you'd only visit. Something to think about if you ever move."),
            U("My notice period is three months, so I couldn't start before February anyway.", kind="fact", imp=0.6, tags=["job"]),
            A("That works nicely: a February start, before the wedding and the race in March."),
        ],
    },
    {
        "sid": "bram-s07", "start": "2026-10-24T07:12:08", "tags": ["sleep"],
        "turns": [
            U("Third night in a row I'm awake at 3am. My brain just starts going through the job decision.", kind="emotion", imp=0.7, tags=["sleep", "job"]),
            A("That sounds exhausting. When you wake at 3, do you stay in bed or get up?"),
            U("I stay in bed and scroll my phone, which I know is wrong."),
            A("Very common. Next time get up, keep the light dim and read something boring on paper for twenty minutes, then go back."),
            U("Boring on paper. I have a tax guide, that should do it."),
            A("Perfect sleep material. Writing the job thoughts down before bed can also help, so your brain knows they're parked."),
            U("I'll try. I had two espressos at 4pm yesterday, maybe that didn't help.", kind="fact", tags=["sleep", "caffeine"]),
            A("Caffeine after 2pm is a frequent culprit. Could you try a cutoff at 13:00 for a week and see?"),
            U("Fine, coffee cutoff at one. Painful but fine.", kind="decision", imp=0.6, tags=["sleep", "caffeine"]),
            A("Logged: coffee cutoff at 13:00 for a week, starting today. I'll ask how the nights were next Saturday."),
            HB(),
            U("Should I skip the long run tomorrow if I sleep badly again?"),
            A("If you slept under five hours, make it an easy 5 km instead. Training tired is how knees start complaining."),
            U("Miso woke me at 5 as well, yelling for breakfast. The special food made her very demanding.", tags=["miso", "sleep"]),
            A("An automatic feeder set to 6:00 might help you both. She'd learn to pester the machine instead."),
            U("Ordering one right now. Anything to sleep past five.", kind="task"),
        ],
    },
    {
        "sid": "bram-s08", "start": "2026-10-26T07:48:30", "tags": ["job"],
        "turns": [
            U("Decision made: I'm taking the Lisbon job. I sent the acceptance this morning.", kind="decision", imp=0.95, tags=["job", "career"]),
            A("Congratulations, Tomas! How does it feel now that it's sent?"),
            U("Lighter. I slept six hours straight last night for the first time in a week.", kind="event", imp=0.5, tags=["sleep"]),
            A("That's probably no coincidence. Deciding often helps more than any sleep trick."),
            U("I'm telling Sabine tomorrow. Dreading it.", kind="emotion", imp=0.6, tags=["job"]),
            A("Keep it short and grateful. She'll likely understand; good managers expect their people to grow."),
            U("Forget what I said about the Lisbon flat. I'm staying in Berlin and working remotely, no move.", kind="correction", imp=0.7, tags=["lisbon", "housing"]),
            A("Done, the Lisbon flat is dropped from your notes. You're staying in Berlin, remote, with monthly trips to Lisbon."),
            U("Start date is 1 February. The first week I'll be in the Lisbon office for onboarding.", kind="fact", imp=0.8, tags=["job"]),
            A("Noted: the new job starts 1 February with an onboarding week in Lisbon. Good chance to practise Portuguese in person."),
            U("Ha, yes. Eu sou engenheiro de dados. Right?"),
            A("Exactly right. And in the wedding speech you can say you work with Portuguese people now."),
        ],
    },
    {
        "sid": "bram-s09", "start": "2026-10-29T19:05:16", "tags": ["running", "wedding"],
        "turns": [
            U("Ran 12 km this morning, moved my Sunday run because of weekend plans. Knee completely fine.", kind="event", imp=0.6, tags=["running"]),
            A("That equals your longest run ever, and this time without pain. Huge progress in two and a half weeks."),
            U("I'd like to try 14 km in two weeks. Too fast?"),
            A("Go to 13 next time, then 14 the week after. Ten percent steps keep the knee happy."),
            U("Okay, 13 then 14. Can we work on the speech? I have an English draft.", kind="decision", imp=0.4, tags=["running"]),
            A("Of course. Paste it and we'll make it shorter first, then translate."),
            U("\"Inês, when we were kids you stole my bike every summer. Today I give you something better: my blessing and a very patient man.\"", tags=["wedding", "speech"]),
            A("Warm and funny. In Portuguese the first part is: \"Inês, quando éramos pequenos roubavas-me a bicicleta todos os verões.\""),
            U("Roubavas-me. That's a hard word to say after wine."),
            A("Practise it slowly this week. We'll add one sentence per evening so it doesn't pile up."),
            U("I told Sabine on Tuesday. She was sad, but said she saw it coming and offered to be a reference.", kind="event", imp=0.6, tags=["job"]),
            A("That's a generous response. It says a lot about the relationship you built there."),
            U("Now I have to hand over the Airflow pipelines. Nobody else understands the billing DAG.", kind="task", imp=0.6, tags=["job", "handover"]),
            A("Want to plan a handover doc together? We could list each DAG, its next owner, and the weird parts."),
            U("Yes, this weekend. The billing DAG has at least three weird parts."),
        ],
    },
]

# Heartbeats that fall between sessions (timestamp, session_id or None).
ADA_IDLE_HEARTBEATS = ["2026-10-14T03:00:00", "2026-10-20T03:00:00"]
BRAM_IDLE_HEARTBEATS = ["2026-10-15T03:00:00", "2026-10-21T03:00:00"]


# ---------------------------------------------------------------------------
# JSONL writer
# ---------------------------------------------------------------------------


def iso(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def dump(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


class Being:
    def __init__(self, name, person, source, rng):
        self.name = name
        self.person = person
        self.source = source
        self.rng = rng
        self.counter = 0
        self.lines: list[bytes] = []
        self.notes: list[tuple[str, int]] = []  # (label, line number)
        self.heartbeat_lines: list[int] = []
        self.trigger_lines: list[tuple[str, int]] = []
        self.valid = 0

    def next_id(self):
        self.counter += 1
        # The first three ids come from an older client that numbered "t-NNNN";
        # both beings have them, so client ids overlap across beings on purpose.
        if self.counter <= 3:
            return f"t-{self.counter:04d}"
        return f"{self.name}-{self.counter:04d}"

    def add(self, raw: bytes, label: str | None = None):
        self.lines.append(raw)
        n = len(self.lines)
        if label:
            self.notes.append((label, n))
        return n

    def heartbeat(self, ts: datetime, sid: str | None):
        probe = {"ts": iso(ts), "speaker": "gateway", "role": "user", "text": HEARTBEAT_PROBE}
        ok = {"ts": iso(ts + timedelta(seconds=self.rng.randint(2, 9))), "speaker": self.name,
              "role": "assistant", "text": "HEARTBEAT_OK"}
        if sid:
            probe["session_id"] = sid
            ok["session_id"] = sid
        ok["source"] = "heartbeat"
        self.heartbeat_lines.append(self.add(dump(probe)))
        self.heartbeat_lines.append(self.add(dump(ok)))

    def turn(self, ts, sid, role, text, meta, default_tags):
        r = self.rng
        obj = {"ts": iso(ts), "speaker": self.person if role == "user" else self.name,
               "role": role, "text": text}
        if r.random() < 0.88:
            obj["id"] = self.next_id()
        if r.random() < 0.92:
            obj["session_id"] = sid
        if "kind" in meta:
            obj["kind"] = meta["kind"]
        elif r.random() < 0.25:
            obj["kind"] = "message"
        if "tags" in meta:
            obj["tags"] = meta["tags"]
        elif r.random() < 0.4:
            obj["tags"] = list(default_tags)
        if "imp" in meta:
            obj["importance"] = meta["imp"]
        elif r.random() < 0.35:
            obj["importance"] = round(r.uniform(0.05, 0.75), 2)
        if r.random() < 0.3:
            obj["confidence"] = round(r.uniform(0.5, 1.0), 2)
        if r.random() < 0.65:
            obj["source"] = self.source
        n = self.add(dump(obj))
        low = text.lower()
        for trig in ("remember", "forget", "reflect"):
            if role == "user" and (low.startswith(trig) or low.startswith("please " + trig)
                                   or low.startswith("let's " + trig)):
                self.trigger_lines.append((trig, n))
        self.valid += 1

    def bad(self, ts, sid, kind):
        if kind == "broken_json":
            raw = (b'{"ts": "' + iso(ts).encode() + b'", "speaker": "Lena", "role": "user", '
                   b'"text": "Is the rerun still going or did it hang again')
            label = "broken JSON (truncated line, no closing quote or brace)"
        elif kind == "bad_ts":
            raw = dump({"ts": "2026-13-45T99:00:00Z", "speaker": "Lena", "role": "user",
                        "text": "Pinging again about the staging snapshot, can we get one before Thursday?",
                        "id": self.next_id(), "session_id": sid, "source": self.source})
            label = 'invalid timestamp "2026-13-45T99:00:00Z"'
        elif kind == "missing_text":
            raw = dump({"ts": iso(ts), "speaker": "Tomas", "role": "user", "id": self.next_id(),
                        "session_id": sid, "kind": "message", "source": self.source})
            label = "missing `text` field"
        elif kind == "bad_utf8":
            obj = {"ts": iso(ts), "speaker": "Tomas", "role": "user",
                   "text": "The special food costs 64 @@ euros a bag. She eats better than me.",
                   "id": self.next_id(), "session_id": sid, "source": self.source}
            raw = dump(obj).replace(b"@@", b"\xff\xfe")
            label = "invalid UTF-8 (raw bytes \\xff\\xfe inside `text`)"
        elif kind == "importance_17":
            raw = dump({"ts": iso(ts), "speaker": "Tomas", "role": "user",
                        "text": "Honestly this job could change everything, it feels like the biggest thing this year.",
                        "id": self.next_id(), "session_id": sid, "kind": "emotion",
                        "importance": 1.7, "source": self.source})
            label = "importance 1.7 (out of 0..1)"
        else:
            raise ValueError(kind)
        self.add(raw, label)


def build_jsonl(being: Being, sessions, idle_heartbeats) -> bytes:
    r = being.rng
    idle = [datetime.fromisoformat(s) for s in idle_heartbeats]
    for sess in sessions:
        ts = datetime.fromisoformat(sess["start"])
        while idle and idle[0] < ts:
            being.heartbeat(idle.pop(0), None)
        prev_role = None
        for role, text, meta in sess["turns"]:
            if role == "heartbeat":
                ts += timedelta(seconds=r.randint(600, 1500))
                being.heartbeat(ts, sess["sid"])
                ts += timedelta(seconds=r.randint(60, 300))
                prev_role = None
                continue
            if prev_role == "user" and role == "assistant":
                ts += timedelta(seconds=r.randint(4, 45))
            elif prev_role is not None:
                ts += timedelta(seconds=r.randint(25, 320))
            if role == "bad":
                being.bad(ts, sess["sid"], text)
                prev_role = "user"
                continue
            being.turn(ts, sess["sid"], role, text, meta, sess["tags"])
            prev_role = role
    for t in idle:
        being.heartbeat(t, None)
    return b"".join(line + b"\n" for line in being.lines)


# ---------------------------------------------------------------------------
# OpenClaw transcript for ada (2026-10-31)
# ---------------------------------------------------------------------------

OPENCLAW = [
    ("user", [("text", "Quick one before the birthday lunch: can you look at issue 318, the flaky test_payout_rounding?")]),
    ("assistant", [("thinking", "Issue 318 says the test times out under load. First measure how often it fails by running it many times."),
                   ("tool", "bash", {"command": "pytest tests/test_payouts.py::test_payout_rounding -q --count 50"}),
                   ("text", "Let me run it fifty times to see how often it fails.")]),
    ("toolResult", "bash", "..F...................F...........................\n2 failed, 48 passed in 41.2s"),
    ("assistant", [("text", "Two failures in fifty runs. Both are timeouts at the 2 second limit, not wrong rounding results.")]),
    ("user", [("text", "So the rounding logic is fine and the test is just slow?")]),
    ("assistant", [("tool", "bash", {"command": "grep -n -e timeout -e build_payouts tests/test_payouts.py"}),
                   ("text", "Checking how the test is set up.")]),
    ("toolResult", "bash", "14:@pytest.mark.timeout(2)\n88:    payouts = build_payouts(n=50_000)"),
    ("assistant", [("thinking", "50,000 payouts just to exercise rounding branches; a few hundred cases with the edge amounts would cover it."),
                   ("text", "The test builds 50,000 payouts to check rounding. 500 cover every rounding branch, including the half-cent edge cases.")]),
    ("user", [("text", "Reduce it to 500 and keep a separate big-batch test marked slow.")]),
    ("assistant", [("tool", "edit", {"path": "tests/test_payouts.py", "oldText": "build_payouts(n=50_000)", "newText": "build_payouts(n=500)"}),
                   ("text", "Changed n to 500 and added test_payout_rounding_large with @pytest.mark.slow for the 50,000 case.")]),
    ("toolResult", "edit", "Edited tests/test_payouts.py (1 replacement, 1 new test function)"),
    ("assistant", [("tool", "bash", {"command": "pytest tests/test_payouts.py -q -m 'not slow' --count 200"}),
                   ("text", "Running the fast variant two hundred times to be sure.")]),
    ("toolResult", "bash", "200 passed, 1 deselected in 6.8s"),
    ("assistant", [("text", "200 runs without a failure, 6.8 seconds in total.")]),
    ("heartbeat", None),
    ("model_change", None),
    ("user", [("text", "Does CI run the slow marker at all?")]),
    ("assistant", [("tool", "bash", {"command": "grep -rn slow .github/workflows/ci.yml pyproject.toml"}),
                   ("text", "Looking at the CI config and the pytest markers.")]),
    ("toolResult", "bash", "pyproject.toml:41:    \"slow: long-running tests\","),
    ("assistant", [("text", "The marker is registered but CI never filters on it, so slow tests run on every push. I'd move them to a nightly job.")]),
    ("user", [("text", "Yes, nightly at 02:00 UTC. Keep the push builds fast.")]),
    ("assistant", [("tool", "write", {"path": ".github/workflows/nightly.yml", "content": "name: nightly\non:\n  schedule:\n    - cron: '0 2 * * *'\n"}),
                   ("text", "Creating the nightly workflow.")]),
    ("toolResult", "write", "Wrote 18 lines to .github/workflows/nightly.yml"),
    ("assistant", [("text", "Nightly workflow runs pytest -m slow at 02:00 UTC on main, and the push workflow now passes -m 'not slow'.")]),
    ("user", [("text", "How long does the push build take now?")]),
    ("assistant", [("tool", "bash", {"command": "pytest -q -m 'not slow'"}),
                   ("text", "Timing the fast suite locally.")]),
    ("toolResult", "bash", "609 passed, 3 skipped, 4 deselected in 94.3s"),
    ("assistant", [("text", "94 seconds locally, down from about two and a half minutes, because four slow tests are deselected.")]),
    ("user", [("text", "Great. Commit it with a message that references issue 318.")]),
    ("assistant", [("tool", "bash", {"command": "git commit -am 'Speed up payout rounding test, run slow tests nightly (fixes #318)'"}),
                   ("text", "Committing on your branch.")]),
    ("toolResult", "bash", "[lena/fix-318 7c1e0d4] Speed up payout rounding test, run slow tests nightly (fixes #318)\n 2 files changed, 31 insertions(+), 4 deletions(-)"),
    ("assistant", [("text", "Committed on lena/fix-318 as 7c1e0d4. I haven't pushed; you can open the PR on Monday.")]),
    ("user", [("text", "Perfect. Please remember that I push my own branches, never push for me.")]),
    ("assistant", [("text", "Understood: I'll commit locally when you ask and always leave pushing to you.")]),
    ("user", [("text", "Off to the birthday lunch now. Thanks, ada.")]),
    ("assistant", [("text", "Enjoy the lunch, and happy birthday to your partner!")]),
]


def build_openclaw(rng: random.Random):
    t = datetime(2026, 10, 31, 9, 0, 0)
    out = [dump({"type": "session", "version": 3, "id": "oc-ada-1031",
                 "timestamp": "2026-10-31T09:00:00Z", "cwd": "/home/lena/ledgerline"})]
    t += timedelta(seconds=3, milliseconds=120)
    parent = None
    n_msg = 0
    call_no = 0
    last_call = None
    heartbeat_lines = []
    valid = 0

    def stamp(dt):
        return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"

    def record(role, content, extra=None):
        nonlocal n_msg, parent
        n_msg += 1
        mid = f"m{n_msg:03d}"
        msg = {"role": role, "content": content}
        if extra:
            msg.update(extra)
        out.append(dump({"type": "message", "id": mid, "parentId": parent,
                         "timestamp": stamp(t), "message": msg}))
        parent = mid
        return len(out)

    first = True
    for item in OPENCLAW:
        if not first:
            if item[0] == "toolResult":
                t += timedelta(milliseconds=rng.randint(300, 9000))
            elif item[0] == "assistant":
                t += timedelta(milliseconds=rng.randint(2000, 14000))
            else:
                t += timedelta(milliseconds=rng.randint(15000, 150000))
        first = False
        kind = item[0]
        if kind == "heartbeat":
            t += timedelta(minutes=3)
            heartbeat_lines.append(record("user", [{"type": "text", "text": HEARTBEAT_PROBE}]))
            t += timedelta(milliseconds=rng.randint(1500, 4000))
            heartbeat_lines.append(record("assistant", [{"type": "text", "text": "HEARTBEAT_OK"}]))
        elif kind == "model_change":
            out.append(dump({"type": "model_change", "id": "mc01", "parentId": parent,
                             "timestamp": stamp(t), "provider": "anthropic",
                             "modelId": "claude-sonnet-4-5"}))
            parent = "mc01"
        elif kind == "toolResult":
            _, name, text = item
            record("toolResult", [{"type": "text", "text": text}],
                   {"toolCallId": last_call, "toolName": name, "isError": False})
            valid += 1
        else:
            role, parts = item
            content = []
            for p in parts:
                if p[0] == "text":
                    content.append({"type": "text", "text": p[1]})
                elif p[0] == "thinking":
                    content.append({"type": "thinking", "thinking": p[1]})
                elif p[0] == "tool":
                    call_no += 1
                    last_call = f"c{call_no}"
                    content.append({"type": "toolCall", "id": last_call, "name": p[1], "arguments": p[2]})
            record(role, content)
            valid += 1
    return b"".join(line + b"\n" for line in out), n_msg, heartbeat_lines, valid


# ---------------------------------------------------------------------------
# bram's daily markdown logs
# ---------------------------------------------------------------------------

MD_2026_10_20 = """\
# 2026-10-20
- [decision|i=0.9] Tomas confirmed his Porto half marathon entry for 14 March; bib pickup is on the 13th, the wedding day
- [fact|i=0.5] Miso started the eight-week chicken-free vet diet yesterday and eats it without fuss
- [i=0.3] Rainy morning, so Tomas skipped the canal and ran on the treadmill at the gym
## 07:40 | event | confidence:high | tags:[running, health]
Easy 5 km on the treadmill at 6:30 per km.
Left knee quiet, no stiffness afterwards.
- [preference] Tomas prefers short voice notes over long text messages before 9am
## 12:15 | task | confidence:medium | tags:[wedding, travel]
Check Berlin to Porto flights for 11 to 15 March; Inês suggested arriving on Thursday evening.
- [fact|i=0.7] Inês's fiancé is called Rui; his family runs a bakery in Matosinhos
## 18:05 | fact | confidence:high | tags:[portuguese, learning]
Finished lesson 20 of the European Portuguese podcast.
Nasal vowels, as in "pão" and "mãe", are still the hardest part.
- [i=0.2] Bought new running socks, the green ones with a heel tab
## 21:10 | emotion | confidence:medium | tags:[sleep]
Feeling wired at bedtime after a long call with the Lisbon recruiter.
Expects a bad night.
- [decision|i=0.6] Portuguese podcast moves to the Wednesday run instead of the evenings
- [i=0.35] Neighbour Frau Keller offered to feed Miso during the Porto trip
"""

MD_2026_10_27 = """\
# 2026-10-27
## 08:10 | event | confidence:high | tags:[work, job]
Told Sabine about the new job in this morning's one-to-one.
She took it well and offered to be a reference.
- [decision|i=0.95] Tomas accepted the Lisbon fintech offer; he starts on 1 February, working remotely from Berlin
- [fact|i=0.8] Notice period at the current job is three months; the last working day is 31 January
- [i=0.25] Miso knocked the automatic feeder off the shelf during the night
## 25:99 | event | confidence:high | tags:[x]
Handover meeting moved again, no new date yet.
## 13:30 | task | confidence:high | tags:[work, handover]
Write a handover document for the Airflow pipelines.
The billing DAG needs the most detail, especially its retry logic.
- [preference] Tomas wants Sunday mornings kept free of any work talk
## 19:45 | event | confidence:medium | tags:[running]
Easy 6 km in the dark with a head torch; knee fine.
- [fact|i=0.45] The automatic feeder is set to 06:00; Miso now waits next to it instead of on the bed
- [i=0.15] Tried a pastel de nata from the new café on Weserstraße; far too sweet
## 22:30 | emotion | confidence:high | tags:[sleep, job]
Relieved and tired after telling Sabine.
Has slept better for the two nights since deciding.
- [task|i=0.55] Send Inês the first draft of the wedding speech by Sunday
"""


def md_entries(text: str):
    """(valid entry count, line number of the malformed heading or None)."""
    import re
    ok, bad = 0, None
    head = re.compile(r"^## ([01]\d|2[0-3]):[0-5]\d \| ")
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("- ["):
            ok += 1
        elif line.startswith("## "):
            if head.match(line):
                ok += 1
            else:
                bad = n
    return ok, bad


# ---------------------------------------------------------------------------


def write(path: Path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def main():
    rng = random.Random(SEED)
    ada = Being("ada", "Lena", "cli", rng)
    bram = Being("bram", "Tomas", "telegram", rng)

    ada_jsonl = build_jsonl(ada, ADA_SESSIONS, ADA_IDLE_HEARTBEATS)
    bram_jsonl = build_jsonl(bram, BRAM_SESSIONS, BRAM_IDLE_HEARTBEATS)
    oc, oc_msgs, oc_hb, oc_valid = build_openclaw(rng)

    files = {
        "inbox/ada/2026-10-session-log.jsonl": ada_jsonl,
        "inbox/ada/2026-10-31-openclaw.jsonl": oc,
        "inbox/bram/2026-10-bram.jsonl": bram_jsonl,
        "inbox/bram/2026-10-20.md": MD_2026_10_20.encode("utf-8"),
        "inbox/bram/2026-10-27.md": MD_2026_10_27.encode("utf-8"),
    }
    for rel, data in files.items():
        write(HERE / rel, data)

    md20_ok, _ = md_entries(MD_2026_10_20)
    md27_ok, md27_bad = md_entries(MD_2026_10_27)

    def lines(nums):
        return ", ".join(str(n) for n in nums)

    bad_rows = []
    for being, rel in ((ada, "inbox/ada/2026-10-session-log.jsonl"),
                       (bram, "inbox/bram/2026-10-bram.jsonl")):
        for label, n in being.notes:
            bad_rows.append(f"- `{rel}:{n}` - {label}")
    bad_rows.append(f"- `inbox/bram/2026-10-27.md:{md27_bad}` - malformed heading `## 25:99 ...` (its body line belongs to it)")

    trig = []
    for being, rel in ((ada, "inbox/ada/2026-10-session-log.jsonl"),
                       (bram, "inbox/bram/2026-10-bram.jsonl")):
        trig += [f"{t} `{rel.split('/')[-1]}:{n}`" for t, n in being.trigger_lines]

    readme = f"""\
# mindflow sample inbox

Hand-written, synthetic data for two beings, generated by `make_samples.py` (stdlib only, fixed seed; re-running gives identical bytes). Days covered: 2026-10-12 .. 2026-10-31.

- **ada**: coding assistant for Lena on *ledgerline* (payments reconciliation: OAuth PKCE, a flaky Postgres migration, a CSV importer, DuckDB for reporting, a Friday release, code review), plus private bits (family, vacation, a possible team switch). Files: `inbox/ada/2026-10-session-log.jsonl` (inbox JSONL, sessions ada-s01..s09, {ada.valid} valid turns) and `inbox/ada/2026-10-31-openclaw.jsonl` (OpenClaw v3 transcript: {oc_msgs} message records incl. toolCall/thinking/toolResult, one model_change).
- **bram**: personal companion for Tomas (half marathon training, Portuguese, his sister's wedding in Porto, Miso the cat, a job change, sleep). Files: `inbox/bram/2026-10-bram.jsonl` (sessions bram-s01..s09, {bram.valid} valid turns) and daily logs `inbox/bram/2026-10-20.md` ({md20_ok} entries), `inbox/bram/2026-10-27.md` ({md27_ok} valid entries).
- Client ids `t-0001`..`t-0003` occur in both beings' JSONL on purpose (ids are only unique per being); some lines have no `id` at all.
- Heartbeats (probe + `HEARTBEAT_OK`): ada JSONL lines {lines(ada.heartbeat_lines)}; bram JSONL lines {lines(bram.heartbeat_lines)}; OpenClaw lines {lines(oc_hb)}.
- Explicit triggers: {"; ".join(trig)}; plus "Please remember that I push my own branches" in the OpenClaw transcript.

Bad lines planted on purpose (each should be quarantined, the rest of the file still ingested):
{chr(10).join(bad_rows)}
"""
    write(HERE / "README.md", readme.encode("utf-8"))


if __name__ == "__main__":
    main()
