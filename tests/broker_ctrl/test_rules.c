/*
 * test_rules.c -- CUnit tests of the controller's partition rules (kb_ctrl_rules.h): clean and
 * unclean election, fencing a broker out of ISRs, offline partitions coming back,
 * AlterPartition validation, replica assignment.
 */
#include <CUnit/Basic.h>
#include <string.h>

#include "kb_ctrl_rules.h"
#include "ctrl_fixture.h"
#include "kp_errcode.h"

static void test_elect_clean(void)
{
    static const int32_t r[] = {3, 1, 2}, isr[] = {2, 1};
    kb_ctrl_part_t p = part(3, r, 3, isr, 2);
    uint32_t all = 0xe, no1 = 0xc, none = 0, only3 = 0x8;
    bool unclean = true;

    /* replica order decides, not ISR order: 1 comes before 2 in the replicas */
    CU_ASSERT_EQUAL(kb_ctrl_elect(&p, usable_mask, &only3, false, &unclean), -1);
    CU_ASSERT_EQUAL(kb_ctrl_elect(&p, usable_mask, &all, false, &unclean), 1);
    CU_ASSERT_FALSE(unclean);
    CU_ASSERT_EQUAL(kb_ctrl_elect(&p, usable_mask, &no1, false, NULL), 2);
    CU_ASSERT_EQUAL(kb_ctrl_elect(&p, usable_mask, &none, false, NULL), -1);
    /* 3 is usable but out of sync: clean election refuses it */
    CU_ASSERT_EQUAL(kb_ctrl_elect(&p, usable_mask, &only3, false, NULL), -1);
    /* unclean election takes it and says so */
    CU_ASSERT_EQUAL(kb_ctrl_elect(&p, usable_mask, &only3, true, &unclean), 3);
    CU_ASSERT_TRUE(unclean);
    CU_ASSERT_EQUAL(kb_ctrl_elect(&p, usable_mask, &none, true, &unclean), -1);
}

static void test_fence_leader(void)
{
    static const int32_t r[] = {1, 2, 3}, isr[] = {1, 2, 3};
    kb_ctrl_part_t p = part(1, r, 3, isr, 3), out;
    uint32_t alive = 0xc; /* 2 and 3 */

    CU_ASSERT_TRUE(kb_ctrl_part_fence(&p, 1, usable_mask, &alive, false, &out));
    CU_ASSERT_EQUAL(out.leader, 2);
    CU_ASSERT_EQUAL(out.nisr, 2);
    CU_ASSERT_EQUAL(out.isr[0], 2);
    CU_ASSERT_EQUAL(out.isr[1], 3);
    CU_ASSERT_EQUAL(out.leader_epoch, 6);
    CU_ASSERT_EQUAL(out.partition_epoch, 10);
    CU_ASSERT_EQUAL(out.nreplicas, 3); /* replicas never change */
}

static void test_fence_follower(void)
{
    static const int32_t r[] = {1, 2, 3}, isr[] = {1, 2, 3};
    kb_ctrl_part_t p = part(1, r, 3, isr, 3), out;
    uint32_t alive = 0xa; /* 1 and 3 */

    CU_ASSERT_TRUE(kb_ctrl_part_fence(&p, 2, usable_mask, &alive, false, &out));
    CU_ASSERT_EQUAL(out.leader, 1);
    CU_ASSERT_EQUAL(out.leader_epoch, 5); /* leader unchanged: no leader epoch bump */
    CU_ASSERT_EQUAL(out.partition_epoch, 10);
    CU_ASSERT_EQUAL(out.nisr, 2);
    CU_ASSERT_FALSE(kb_ctrl_has(out.isr, out.nisr, 2));

    /* a broker that is no replica: nothing changes */
    CU_ASSERT_FALSE(kb_ctrl_part_fence(&p, 7, usable_mask, &alive, false, &out));
    CU_ASSERT_EQUAL(memcmp(&out, &p, sizeof(p)), 0);
}

static void test_fence_last_isr(void)
{
    /* ISR = [1] (2 and 3 lag): 1 dies -> offline, ISR keeps 1, lagging 2/3 not elected */
    static const int32_t r[] = {1, 2, 3}, isr[] = {1};
    kb_ctrl_part_t p = part(1, r, 3, isr, 1), out, back;
    uint32_t alive = 0xc, all = 0xe;
    bool changed = kb_ctrl_part_fence(&p, 1, usable_mask, &alive, false, &out);

    CU_ASSERT_TRUE(changed);
    CU_ASSERT_EQUAL(out.leader, -1);
    CU_ASSERT_EQUAL(out.nisr, 1);
    CU_ASSERT_EQUAL(out.isr[0], 1);
    CU_ASSERT_EQUAL(out.leader_epoch, 6);
    /* still offline while only the laggards live */
    CU_ASSERT_FALSE(kb_ctrl_part_reelect(&out, usable_mask, &alive, false, &back));
    /* 1 returns: it leads again */
    CU_ASSERT_TRUE(kb_ctrl_part_reelect(&out, usable_mask, &all, false, &back));
    CU_ASSERT_EQUAL(back.leader, 1);
    CU_ASSERT_EQUAL(back.leader_epoch, 7);
    CU_ASSERT_EQUAL(back.partition_epoch, out.partition_epoch + 1);

    /* with unclean election the lagging 2 leads and the ISR becomes [2] */
    CU_ASSERT_TRUE(kb_ctrl_part_fence(&p, 1, usable_mask, &alive, true, &out));
    CU_ASSERT_EQUAL(out.leader, 2);
    CU_ASSERT_EQUAL(out.nisr, 1);
    CU_ASSERT_EQUAL(out.isr[0], 2);
}

static void test_alter_check(void)
{
    static const int32_t r[] = {1, 2, 3}, isr[] = {1, 2};
    kb_ctrl_part_t p = part(1, r, 3, isr, 2);
    uint32_t all = 0xe, no3 = 0x6;
    char msg[200];
    static const int32_t grow[] = {1, 2, 3}, shrink[] = {1}, noleader[] = {2, 3},
                         stranger[] = {1, 4}, dup[] = {1, 1};

    CU_ASSERT_EQUAL(kb_ctrl_alter_check(&p, 1, 5, 9, grow, 3, usable_mask, &all, msg, sizeof(msg)),
                    0);
    CU_ASSERT_EQUAL(
        kb_ctrl_alter_check(&p, 1, 5, 9, shrink, 1, usable_mask, &all, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(kb_ctrl_alter_check(&p, 2, 5, 9, grow, 3, usable_mask, &all, msg, sizeof(msg)),
                    KP_ERR_INVALID_REQUEST);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "not the leader"));
    CU_ASSERT_EQUAL(kb_ctrl_alter_check(&p, 1, 4, 9, grow, 3, usable_mask, &all, msg, sizeof(msg)),
                    KP_ERR_FENCED_LEADER_EPOCH);
    CU_ASSERT_EQUAL(kb_ctrl_alter_check(&p, 1, 6, 9, grow, 3, usable_mask, &all, msg, sizeof(msg)),
                    KP_ERR_FENCED_LEADER_EPOCH);
    CU_ASSERT_EQUAL(kb_ctrl_alter_check(&p, 1, 5, 8, grow, 3, usable_mask, &all, msg, sizeof(msg)),
                    KP_ERR_INVALID_UPDATE_VERSION);
    CU_ASSERT_EQUAL(
        kb_ctrl_alter_check(&p, 1, 5, 9, noleader, 2, usable_mask, &all, msg, sizeof(msg)),
        KP_ERR_INVALID_REQUEST);
    CU_ASSERT_EQUAL(
        kb_ctrl_alter_check(&p, 1, 5, 9, stranger, 2, usable_mask, &all, msg, sizeof(msg)),
        KP_ERR_INVALID_REQUEST);
    CU_ASSERT_EQUAL(kb_ctrl_alter_check(&p, 1, 5, 9, dup, 2, usable_mask, &all, msg, sizeof(msg)),
                    KP_ERR_INVALID_REQUEST);
    CU_ASSERT_EQUAL(kb_ctrl_alter_check(&p, 1, 5, 9, grow, 0, usable_mask, &all, msg, sizeof(msg)),
                    KP_ERR_INVALID_REQUEST);
    /* adding fenced 3 is refused; keeping fenced 2 (already in the ISR) is not */
    CU_ASSERT_EQUAL(kb_ctrl_alter_check(&p, 1, 5, 9, grow, 3, usable_mask, &no3, msg, sizeof(msg)),
                    KP_ERR_INELIGIBLE_REPLICA);
    CU_ASSERT_EQUAL(kb_ctrl_alter_check(&p, 1, 5, 9, isr, 2, usable_mask, &no3, msg, sizeof(msg)),
                    0);
}

static void test_assign(void)
{
    static const int32_t brokers[] = {1, 2, 3};
    int32_t out[3], leaders[4] = {0};

    for (int32_t p = 0; p < 6; p++) {
        CU_ASSERT_EQUAL(kb_ctrl_assign(brokers, 3, 3, p, 0, out), 0);
        CU_ASSERT(out[0] != out[1] && out[1] != out[2] && out[0] != out[2]);
        leaders[out[0]]++;
    }
    /* leaders spread evenly */
    CU_ASSERT_EQUAL(leaders[1], 2);
    CU_ASSERT_EQUAL(leaders[2], 2);
    CU_ASSERT_EQUAL(leaders[3], 2);
    CU_ASSERT_EQUAL(kb_ctrl_assign(brokers, 3, 2, 1, 7, out), 0);
    CU_ASSERT_EQUAL(out[0], 3); /* (7 + 1) % 3 = 2 -> broker 3 */
    CU_ASSERT_EQUAL(out[1], 1);
    CU_ASSERT_EQUAL(kb_ctrl_assign(brokers, 3, 4, 0, 0, out), KP_ERR_INVALID_REPLICATION_FACTOR);
    CU_ASSERT_EQUAL(kb_ctrl_assign(brokers, 3, 0, 0, 0, out), KP_ERR_INVALID_REPLICATION_FACTOR);
    CU_ASSERT_EQUAL(kb_ctrl_assign(brokers, 0, 1, 0, 0, out), KP_ERR_INVALID_REPLICATION_FACTOR);
}

int main(void)
{
    CU_pSuite s;
    unsigned failed;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("ctrl rules", NULL, NULL);
    CU_add_test(s, "clean and unclean election", test_elect_clean);
    CU_add_test(s, "fencing the leader", test_fence_leader);
    CU_add_test(s, "fencing a follower", test_fence_follower);
    CU_add_test(s, "fencing the last ISR member", test_fence_last_isr);
    CU_add_test(s, "AlterPartition checks", test_alter_check);
    CU_add_test(s, "replica assignment", test_assign);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
