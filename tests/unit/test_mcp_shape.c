/* Unit tests for manager/front/mcp_shape.c: the MCP tool text within its limit, head and tail of each
 * stream at character and line boundaries, the marker's counts and file, small output unchanged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mcp_shape.h"

static struct mcp_stream stream(const char *name, const char *text, size_t len)
{
	return (struct mcp_stream){ .name = name, .text = text, .len = len, .bytes = (long long)len };
}

/* "1\n2\n...n\n" */
static char *numbered(int n, size_t *len)
{
	char *buf = malloc((size_t)n * 8 + 1);
	size_t w = 0;

	assert_non_null(buf);
	for (int i = 1; i <= n; i++)
		w += (size_t)sprintf(buf + w, "%d\n", i);
	*len = w;
	return buf;
}

static bool utf8_valid(const char *s, size_t len)
{
	for (size_t i = 0; i < len;) {
		unsigned char b = (unsigned char)s[i];
		size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;

		if (n == 0 || i + n > len)
			return false;
		for (size_t k = 1; k < n; k++)
			if (((unsigned char)s[i + k] & 0xC0) != 0x80)
				return false;
		i += n;
	}
	return true;
}

/* The marker's "[... N bytes omitted" count, and where the marker line starts and ends. */
static size_t marker_find(const char *text, const char *from, size_t *start, size_t *end)
{
	const char *m = strstr(from, "[... ");
	const char *e;
	size_t omitted = 0;

	assert_non_null(m);
	e = strstr(m, " ...]\n");
	assert_non_null(e);
	assert_int_equal(sscanf(m, "[... %zu bytes omitted", &omitted), 1);
	*start = (size_t)(m - text);
	*end = (size_t)(e + strlen(" ...]\n") - text);
	return omitted;
}

static void test_small_output_unchanged(void **state)
{
	struct mcp_stream s[2] = { stream("stdout", "hi\n", 3), stream("stderr", "oops", 4) };
	size_t len;
	char *text = mcp_shape(s, NULL, "exit code 3", 30000, &len);

	(void)state;
	assert_string_equal(text, "hi\n[stderr]\noops\nexit code 3");
	assert_int_equal(len, strlen(text));
	free(text);
	s[0] = stream("stdout", "", 0);
	s[1] = stream("stderr", "", 0);
	text = mcp_shape(s, NULL, "exit code 0", 30000, &len);
	assert_string_equal(text, "exit code 0");
	free(text);
}

/* The agent's own notes stay as they were: a cut stream's byte count, the escaping rule. */
static void test_agent_notes_unchanged(void **state)
{
	struct mcp_stream s[2] = { stream("stdout", "a\\x00b", 6), stream("stderr", "", 0) };
	size_t len;
	char *text;

	(void)state;
	s[0].escaped = true;
	s[0].truncated = true;
	s[0].bytes = 5000000;
	text = mcp_shape(s, NULL, "exit code 0", 30000, &len);
	assert_string_equal(text, "a\\x00b\n[stdout: 5000000 bytes, only the start and the end shown, not all text: "
			    "each byte that is not UTF-8, each NUL and each byte of a control or bidi character is shown "
			    "as \\xNN and a backslash as \\\\]\n"
			    "exit code 0");
	free(text);
}

static void test_budget_is_the_cut_threshold(void **state)
{
	size_t budget = mcp_shape_budget(30000), len;
	char *big = malloc(budget + 2), *text;
	struct mcp_stream s[2];

	(void)state;
	assert_int_equal(budget, 30000 - 2048);
	assert_int_equal(mcp_shape_budget(1000), 750);
	memset(big, 'x', budget + 1);
	big[budget + 1] = '\0';
	s[0] = stream("stdout", big, budget);
	s[1] = stream("stderr", "", 0);
	text = mcp_shape(s, NULL, "exit code 0", 30000, &len);
	assert_null(strstr(text, "omitted"));
	assert_int_equal(len, budget + 1 + strlen("exit code 0"));
	free(text);
	s[0].len = budget + 1;
	text = mcp_shape(s, NULL, "exit code 0", 30000, &len);
	assert_non_null(strstr(text, "bytes omitted"));
	free(text);
	free(big);
}

/* 200,000 bytes of numbered lines: the first lines, the marker naming the file and the counts,
 * the last lines, within the limit; every byte either shown or counted as omitted. */
static void test_big_output_head_marker_tail(void **state)
{
	size_t in_len, len, mstart, mend, omitted;
	char *in = numbered(36000, &in_len), *text, want[200];
	const char *outcome = "exit code 0";
	struct mcp_stream s[2];

	(void)state;
	assert_true(in_len > 200000);
	s[0] = stream("stdout", in, in_len);
	s[0].kept = "/w/s/.sandbox-tmp/.outputs/exec-abc.stdout";
	s[1] = stream("stderr", "", 0);
	text = mcp_shape(s, NULL, outcome, 30000, &len);
	assert_true(len <= 30000);
	assert_true(len > 25000); /* the room is used, not wasted */
	assert_memory_equal(text, "1\n2\n3\n", 6);
	assert_true(len > strlen("36000\nexit code 0"));
	assert_string_equal(text + len - strlen("35999\n36000\nexit code 0"), "35999\n36000\nexit code 0");
	omitted = marker_find(text, text, &mstart, &mend);
	snprintf(want, sizeof want, "[... %zu bytes omitted: whole output (stdout, %zu bytes) in "
		 "/w/s/.sandbox-tmp/.outputs/exec-abc.stdout ...]\n", omitted, in_len);
	assert_memory_equal(text + mstart, want, strlen(want));
	/* Head and tail are the input's own start and end, cut at line ends. */
	assert_memory_equal(text, in, mstart);
	assert_true(text[mstart - 1] == '\n');
	assert_int_equal(mstart + omitted + (len - strlen(outcome) - mend), in_len);
	assert_memory_equal(text + mend, in + in_len - (len - strlen(outcome) - mend), len - strlen(outcome) - mend);
	assert_true(in[in_len - (len - strlen(outcome) - mend) - 1] == '\n');
	/* About 40% head, 60% tail. */
	assert_true(mstart < (len - strlen(outcome) - mend));
	free(text);
	free(in);
}

static void test_small_limit_honoured(void **state)
{
	size_t in_len, len;
	char *in = numbered(34000, &in_len), *text;
	struct mcp_stream s[2];

	(void)state;
	s[0] = stream("stdout", in, in_len);
	s[0].kept = "/w/s/.sandbox-tmp/.outputs/exec-abc.stdout";
	s[1] = stream("stderr", in, in_len);
	s[1].kept = "/w/s/.sandbox-tmp/.outputs/exec-abc.stderr";
	text = mcp_shape(s, NULL, "exit code 0", 1000, &len);
	assert_true(len <= 1000);
	assert_memory_equal(text, "1\n", 2);
	assert_non_null(strstr(text, "(stdout, "));
	assert_non_null(strstr(text, "\n[stderr]\n1\n"));
	assert_non_null(strstr(text, "(stderr, "));
	assert_non_null(strstr(text, "exec-abc.stderr ...]\n"));
	free(text);
	free(in);
}

/* Both streams over half the room: half each; one small stream whole and the other gets the rest. */
static void test_two_streams_share(void **state)
{
	size_t in_len, len, share[2];
	char *in = numbered(34000, &in_len), *text;
	struct mcp_stream s[2];

	(void)state;
	s[0] = stream("stdout", in, in_len);
	s[1] = stream("stderr", "fatal: no\n", 10);
	mcp_shape_shares(s, NULL, "exit code 1", 30000, share);
	assert_int_equal(share[1], 10);
	assert_true(share[0] > 27000);
	text = mcp_shape(s, NULL, "exit code 1", 30000, &len);
	assert_true(len <= 30000);
	assert_non_null(strstr(text, "\n[stderr]\nfatal: no\nexit code 1"));
	/* Not kept, no reason given. */
	assert_non_null(strstr(text, "bytes); the whole output was not kept ...]\n"));
	free(text);
	s[1] = stream("stderr", in, in_len);
	mcp_shape_shares(s, NULL, "exit code 1", 30000, share);
	assert_true(share[0] == share[1] || share[0] + 1 == share[1]);
	free(in);
}

static void test_not_kept_says_why(void **state)
{
	size_t in_len, len;
	char *in = numbered(34000, &in_len), *text;
	struct mcp_stream s[2];

	(void)state;
	s[0] = stream("stdout", in, in_len);
	s[1] = stream("stderr", "", 0);
	text = mcp_shape(s, "opening /w/.sandbox-tmp/.outputs: a symbolic link or a mount is in its place",
			 "exit code 0", 30000, &len);
	assert_true(len <= 30000);
	assert_non_null(strstr(text, "bytes); the whole output could not be kept: opening /w/.sandbox-tmp/.outputs: "
				     "a symbolic link or a mount is in its place ...]\n"));
	free(text);
	/* A long reason is cut between characters, wherever they fall. */
	for (size_t shift = 0; shift < 2; shift++) {
		char why[1000] = "a";

		for (size_t i = shift; i + 2 < sizeof why; i += 2)
			memcpy(why + i, "\xc3\xa9", 2);
		why[sizeof why - 1] = '\0';
		text = mcp_shape(s, why, "exit code 0", 30000, &len);
		assert_true(utf8_valid(text, len));
		assert_non_null(strstr(text, "could not be kept: "));
		free(text);
	}
	free(in);
}

/* No newline anywhere and two-byte characters: the cuts fall between characters. */
static void test_cut_between_utf8_characters(void **state)
{
	size_t n = 100001, len, mstart, mend;
	char *in = malloc(2 * n + 1), *text;
	struct mcp_stream s[2];

	(void)state;
	in[0] = 'a'; /* odd offsets for every two-byte character */
	for (size_t i = 0; i < n - 1; i++)
		memcpy(in + 1 + 2 * i, "\xc3\xa9", 2);
	s[0] = stream("stdout", in, 2 * n - 1);
	s[1] = stream("stderr", "", 0);
	for (size_t limit = 1000; limit < 1010; limit++) {
		text = mcp_shape(s, NULL, "exit code 0", limit, &len);
		assert_true(len <= limit);
		assert_true(utf8_valid(text, len));
		marker_find(text, text, &mstart, &mend);
		assert_true(mstart > 2);
		free(text);
	}
	free(in);
}

/* Escaped text: a cut never splits \xNN or \\. */
static void test_cut_between_escapes(void **state)
{
	size_t n = 20000, len, mstart, mend, in_len;
	char *in = malloc(6 * n + 1), *text;
	struct mcp_stream s[2];

	(void)state;
	in_len = 0;
	for (size_t i = 0; i < n; i++)
		in_len += (size_t)sprintf(in + in_len, "%s", i % 2 ? "\\\\" : "\\xff");
	s[0] = stream("stdout", in, in_len);
	s[0].escaped = true;
	s[1] = stream("stderr", "", 0);
	for (size_t limit = 2000; limit < 2012; limit++) {
		size_t head, tail_len;

		text = mcp_shape(s, NULL, "exit code 0", limit, &len);
		assert_true(len <= limit);
		marker_find(text, text, &mstart, &mend);
		head = mstart - 1; /* a newline was added after the head */
		assert_int_equal(text[head], '\n');
		assert_int_equal(head % 6 == 0 || head % 6 == 4, 1);
		tail_len = strstr(text + mend, "\n[stdout:") - (text + mend);
		assert_int_equal((in_len - tail_len) % 6 == 0 || (in_len - tail_len) % 6 == 4, 1);
		free(text);
	}
	free(in);
}

/* The structured result's stream is the text's stream. */
static void test_stream_alone_matches_text(void **state)
{
	size_t in_len, len, slen, share[2];
	char *in = numbered(34000, &in_len), *text, *one;
	struct mcp_stream s[2];

	(void)state;
	s[0] = stream("stdout", in, in_len);
	s[0].kept = "/k";
	s[1] = stream("stderr", "", 0);
	text = mcp_shape(s, NULL, "exit code 0", 30000, &len);
	mcp_shape_shares(s, NULL, "exit code 0", 30000, share);
	one = mcp_shape_stream(&s[0], share[0], NULL, &slen);
	assert_true(slen + strlen("exit code 0") == len);
	assert_memory_equal(text, one, slen);
	free(one);
	free(text);
	free(in);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_small_output_unchanged),
		cmocka_unit_test(test_agent_notes_unchanged),
		cmocka_unit_test(test_budget_is_the_cut_threshold),
		cmocka_unit_test(test_big_output_head_marker_tail),
		cmocka_unit_test(test_small_limit_honoured),
		cmocka_unit_test(test_two_streams_share),
		cmocka_unit_test(test_not_kept_says_why),
		cmocka_unit_test(test_cut_between_utf8_characters),
		cmocka_unit_test(test_cut_between_escapes),
		cmocka_unit_test(test_stream_alone_matches_text),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
