/*
 * test_elect.c -- CUnit tests of the controller's requested elections (kb_ctrl_elect.h):
 * PREFERRED and UNCLEAN ElectLeaders rules and the imbalance test of automatic rebalancing.
 */
#include <CUnit/Basic.h>
#include <string.h>

#include "kb_ctrl_elect.h"
#include "ctrl_fixture.h"
#include "kp_errcode.h"

static void test_preferred(void)
{
    static const int32_t r[] = {1, 2, 3}, isr[] = {2, 3, 1}, isr23[] = {2, 3};
    uint32_t all = 0xe, no1 = 0xc, only1 = 0x2;
    kb_ctrl_part_t p = part(2, r, 3, isr, 3), out;
    bool unclean = true;

    /* the preferred replica is in sync and alive: it leads, epochs bumped, ISR unchanged */
    CU_ASSERT_EQUAL(
        kb_ctrl_elect_requested(&p, KB_CTRL_ELECTION_PREFERRED, usable_mask, &all, &out, &unclean),
        0);
    CU_ASSERT_FALSE(unclean);
    CU_ASSERT_EQUAL(out.leader, 1);
    CU_ASSERT_EQUAL(out.leader_epoch, 6);
    CU_ASSERT_EQUAL(out.partition_epoch, 10);
    CU_ASSERT_EQUAL(out.nisr, 3);
    /* already the leader */
    p.leader = 1;
    CU_ASSERT_EQUAL(
        kb_ctrl_elect_requested(&p, KB_CTRL_ELECTION_PREFERRED, usable_mask, &all, &out, NULL),
        KP_ERR_ELECTION_NOT_NEEDED);
    CU_ASSERT_EQUAL(out.leader_epoch, 5);
    /* preferred replica dead: the live leader stays */
    p.leader = 2;
    CU_ASSERT_EQUAL(
        kb_ctrl_elect_requested(&p, KB_CTRL_ELECTION_PREFERRED, usable_mask, &no1, &out, NULL),
        KP_ERR_PREFERRED_LEADER_NOT_AVAILABLE);
    CU_ASSERT_EQUAL(out.leader, 2);
    /* preferred replica alive but out of sync */
    p = part(2, r, 3, isr23, 2);
    CU_ASSERT_EQUAL(
        kb_ctrl_elect_requested(&p, KB_CTRL_ELECTION_PREFERRED, usable_mask, &all, &out, NULL),
        KP_ERR_PREFERRED_LEADER_NOT_AVAILABLE);
    /* leader gone, preferred out of sync: a clean election among the ISR */
    p = part(-1, r, 3, isr23, 2);
    CU_ASSERT_EQUAL(
        kb_ctrl_elect_requested(&p, KB_CTRL_ELECTION_PREFERRED, usable_mask, &all, &out, NULL), 0);
    CU_ASSERT_EQUAL(out.leader, 2);
    /* leader gone, only an out-of-sync replica alive: PREFERRED never elects it */
    CU_ASSERT_EQUAL(
        kb_ctrl_elect_requested(&p, KB_CTRL_ELECTION_PREFERRED, usable_mask, &only1, &out, NULL),
        KP_ERR_PREFERRED_LEADER_NOT_AVAILABLE);
    CU_ASSERT_EQUAL(out.leader, -1);
    /* no replicas at all */
    p = part(-1, r, 0, isr, 0);
    CU_ASSERT_EQUAL(
        kb_ctrl_elect_requested(&p, KB_CTRL_ELECTION_PREFERRED, usable_mask, &all, &out, NULL),
        KP_ERR_PREFERRED_LEADER_NOT_AVAILABLE);
}

static void test_unclean(void)
{
    static const int32_t r[] = {1, 2, 3}, isr3[] = {3}, isr23[] = {2, 3};
    uint32_t all = 0xe, only1 = 0x2, none = 0;
    kb_ctrl_part_t p = part(3, r, 3, isr3, 1), out;
    bool unclean = true;

    /* a partition with a leader needs no election */
    CU_ASSERT_EQUAL(
        kb_ctrl_elect_requested(&p, KB_CTRL_ELECTION_UNCLEAN, usable_mask, &all, &out, &unclean),
        KP_ERR_ELECTION_NOT_NEEDED);
    CU_ASSERT_FALSE(unclean);
    /* leaderless, an ISR member alive: a clean choice even when UNCLEAN is asked */
    p = part(-1, r, 3, isr23, 2);
    CU_ASSERT_EQUAL(
        kb_ctrl_elect_requested(&p, KB_CTRL_ELECTION_UNCLEAN, usable_mask, &all, &out, &unclean),
        0);
    CU_ASSERT_EQUAL(out.leader, 2);
    CU_ASSERT_FALSE(unclean);
    CU_ASSERT_EQUAL(out.nisr, 2);
    /* leaderless, every ISR member dead: the live out-of-sync replica, ISR reset to it */
    p = part(-1, r, 3, isr3, 1);
    CU_ASSERT_EQUAL(
        kb_ctrl_elect_requested(&p, KB_CTRL_ELECTION_UNCLEAN, usable_mask, &only1, &out, &unclean),
        0);
    CU_ASSERT_TRUE(unclean);
    CU_ASSERT_EQUAL(out.leader, 1);
    CU_ASSERT_EQUAL(out.nisr, 1);
    CU_ASSERT_EQUAL(out.isr[0], 1);
    CU_ASSERT_EQUAL(out.leader_epoch, 6);
    CU_ASSERT_EQUAL(out.partition_epoch, 10);
    /* nobody alive */
    CU_ASSERT_EQUAL(
        kb_ctrl_elect_requested(&p, KB_CTRL_ELECTION_UNCLEAN, usable_mask, &none, &out, &unclean),
        KP_ERR_ELIGIBLE_LEADERS_NOT_AVAILABLE);
    CU_ASSERT_EQUAL(out.leader, -1);
    /* an unknown election type */
    CU_ASSERT_EQUAL(kb_ctrl_elect_requested(&p, 7, usable_mask, &all, &out, NULL),
                    KP_ERR_INVALID_REQUEST);
}

static void test_imbalanced(void)
{
    static const int32_t r[] = {1, 2, 3}, all_isr[] = {1, 2, 3}, isr23[] = {2, 3};
    uint32_t all = 0xe, no1 = 0xc;
    kb_ctrl_part_t p = part(2, r, 3, all_isr, 3);

    CU_ASSERT_TRUE(kb_ctrl_elect_imbalanced(&p, usable_mask, &all));
    CU_ASSERT_FALSE(kb_ctrl_elect_imbalanced(&p, usable_mask, &no1));
    p.leader = 1;
    CU_ASSERT_FALSE(kb_ctrl_elect_imbalanced(&p, usable_mask, &all));
    p = part(2, r, 3, isr23, 2);
    CU_ASSERT_FALSE(kb_ctrl_elect_imbalanced(&p, usable_mask, &all));
    p = part(-1, r, 0, r, 0);
    CU_ASSERT_FALSE(kb_ctrl_elect_imbalanced(&p, usable_mask, &all));
}

int main(void)
{
    CU_pSuite s;
    unsigned failed;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    s = CU_add_suite("kb_ctrl_elect", NULL, NULL);
    CU_add_test(s, "PREFERRED", test_preferred);
    CU_add_test(s, "UNCLEAN", test_unclean);
    CU_add_test(s, "imbalance", test_imbalanced);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
