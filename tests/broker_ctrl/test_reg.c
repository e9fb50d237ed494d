/*
 * test_reg.c -- CUnit tests of the controller's broker registry (kb_ctrl_reg.h): registration
 * and epochs, fenced until caught up, session expiry, duplicate and replacing registrations,
 * WantFence / WantShutDown, unregistration. The clock is the test's.
 */
#include <CUnit/Basic.h>
#include <stdlib.h>
#include <string.h>

#include "kb_ctrl_reg.h"
#include "kp_errcode.h"

static kb_ctrl_broker_t brk(int32_t id, uint8_t inc)
{
    kb_ctrl_broker_t b;
    memset(&b, 0, sizeof(b));
    b.id = id;
    memset(&b.incarnation, inc, sizeof(b.incarnation));
    b.nendpoints = 1;
    strcpy(b.endpoints[0].name, "PLAINTEXT");
    strcpy(b.endpoints[0].host, "127.0.0.1");
    b.endpoints[0].port = 9000 + id;
    return b;
}

static void test_register_unfence(void)
{
    kb_ctrl_reg_t *reg = kb_ctrl_reg_new(9000);
    kb_ctrl_broker_t b = brk(2, 1), got;
    kb_ctrl_hb_t hb;
    int64_t e1, e2;

    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    CU_ASSERT_EQUAL(kb_ctrl_reg_register(reg, &b, -1, 1000, 50, &e1), 0);
    CU_ASSERT(e1 >= 1000);
    CU_ASSERT_EQUAL(kb_ctrl_reg_get(reg, 2, &got), 0);
    CU_ASSERT_TRUE(got.fenced); /* starts fenced */
    CU_ASSERT_EQUAL(got.endpoints[0].port, 9002);
    CU_ASSERT_FALSE(kb_ctrl_reg_usable(reg, 2));

    /* behind the log: stays fenced */
    CU_ASSERT_EQUAL(kb_ctrl_reg_heartbeat(reg, 2, e1, 49, false, false, 1500, &hb), 0);
    CU_ASSERT_FALSE(hb.caught_up);
    CU_ASSERT_TRUE(hb.fenced);
    /* caught up: unfenced by this heartbeat */
    CU_ASSERT_EQUAL(kb_ctrl_reg_heartbeat(reg, 2, e1, 50, false, false, 2000, &hb), 0);
    CU_ASSERT_TRUE(hb.caught_up);
    CU_ASSERT_FALSE(hb.fenced);
    CU_ASSERT_TRUE(hb.unfenced_now);
    CU_ASSERT_TRUE(kb_ctrl_reg_usable(reg, 2));
    CU_ASSERT_EQUAL(kb_ctrl_reg_heartbeat(reg, 2, e1, 60, false, false, 2500, &hb), 0);
    CU_ASSERT_FALSE(hb.unfenced_now);

    /* wrong epoch, unknown id */
    CU_ASSERT_EQUAL(kb_ctrl_reg_heartbeat(reg, 2, e1 + 1, 60, false, false, 2600, &hb),
                    KP_ERR_STALE_BROKER_EPOCH);
    CU_ASSERT_EQUAL(kb_ctrl_reg_heartbeat(reg, 3, e1, 60, false, false, 2600, &hb),
                    KP_ERR_BROKER_ID_NOT_REGISTERED);

    /* the same incarnation registering again (a lost answer) gets a new, larger epoch */
    CU_ASSERT_EQUAL(kb_ctrl_reg_register(reg, &b, -1, 2700, 60, &e2), 0);
    CU_ASSERT(e2 > e1);
    CU_ASSERT_EQUAL(kb_ctrl_reg_heartbeat(reg, 2, e1, 60, false, false, 2800, &hb),
                    KP_ERR_STALE_BROKER_EPOCH);
    kb_ctrl_reg_free(reg);
}

static void test_expire_and_replace(void)
{
    kb_ctrl_reg_t *reg = kb_ctrl_reg_new(9000);
    kb_ctrl_broker_t b = brk(3, 1), b2 = brk(3, 2), got;
    kb_ctrl_hb_t hb;
    int64_t e1, e2, e3;
    int32_t ids[4];

    CU_ASSERT_EQUAL(kb_ctrl_reg_register(reg, &b, -1, 0, -1, &e1), 0);
    CU_ASSERT_EQUAL(kb_ctrl_reg_heartbeat(reg, 3, e1, -1, false, false, 100, &hb), 0);
    CU_ASSERT_FALSE(hb.fenced);
    /* another process with the same id while the session is valid: refused */
    CU_ASSERT_EQUAL(kb_ctrl_reg_register(reg, &b2, -1, 5000, -1, &e2),
                    KP_ERR_DUPLICATE_BROKER_REGISTRATION);
    /* ... unless it names the current epoch (a clean restart) */
    CU_ASSERT_EQUAL(kb_ctrl_reg_register(reg, &b2, e1, 5000, -1, &e2), 0);
    CU_ASSERT(e2 > e1);
    CU_ASSERT_EQUAL(kb_ctrl_reg_heartbeat(reg, 3, e2, -1, false, false, 5100, &hb), 0);

    /* silent: not expired at exactly the timeout, expired after */
    CU_ASSERT_EQUAL(kb_ctrl_reg_expire(reg, 5100 + 9000, ids, 4), 0);
    CU_ASSERT_EQUAL(kb_ctrl_reg_expire(reg, 5100 + 9001, ids, 4), 1);
    CU_ASSERT_EQUAL(ids[0], 3);
    CU_ASSERT_EQUAL(kb_ctrl_reg_expire(reg, 5100 + 9002, ids, 4), 0); /* once */
    CU_ASSERT_EQUAL(kb_ctrl_reg_get(reg, 3, &got), 0);                /* still registered */
    CU_ASSERT_TRUE(got.fenced);
    /* a new incarnation after the session expired replaces the registration */
    CU_ASSERT_EQUAL(kb_ctrl_reg_register(reg, &b, -1, 20000, -1, &e3), 0);
    CU_ASSERT(e3 > e2);
    CU_ASSERT_EQUAL(kb_ctrl_reg_unregister(reg, 3), 0);
    CU_ASSERT_EQUAL(kb_ctrl_reg_unregister(reg, 3), KP_ERR_BROKER_ID_NOT_REGISTERED);
    CU_ASSERT_EQUAL(kb_ctrl_reg_get(reg, 3, &got), -1);
    kb_ctrl_reg_free(reg);
}

static void test_fence_shutdown_list(void)
{
    kb_ctrl_reg_t *reg = kb_ctrl_reg_new(9000);
    kb_ctrl_broker_t *list;
    kb_ctrl_hb_t hb;
    size_t n;
    int64_t e[4];

    for (int32_t id = 3; id >= 1; id--) {
        kb_ctrl_broker_t b = brk(id, (uint8_t)id);
        CU_ASSERT_EQUAL(kb_ctrl_reg_register(reg, &b, -1, 0, -1, &e[id]), 0);
        CU_ASSERT_EQUAL(kb_ctrl_reg_heartbeat(reg, id, e[id], 0, false, false, 10, &hb), 0);
    }
    CU_ASSERT_EQUAL(kb_ctrl_reg_list(reg, &list, &n), 0);
    CU_ASSERT_EQUAL_FATAL(n, 3);
    CU_ASSERT(list[0].id == 1 && list[1].id == 2 && list[2].id == 3); /* sorted */
    free(list);
    /* WantFence fences; without it again it is unfenced */
    CU_ASSERT_EQUAL(kb_ctrl_reg_heartbeat(reg, 1, e[1], 0, true, false, 20, &hb), 0);
    CU_ASSERT_TRUE(hb.fenced && hb.fenced_now);
    CU_ASSERT_EQUAL(kb_ctrl_reg_heartbeat(reg, 1, e[1], 0, false, false, 30, &hb), 0);
    CU_ASSERT_FALSE(hb.fenced);
    /* WantShutDown: not usable any more, never unfenced again */
    CU_ASSERT_EQUAL(kb_ctrl_reg_heartbeat(reg, 2, e[2], 0, false, true, 40, &hb), 0);
    CU_ASSERT_TRUE(hb.shutting_down);
    CU_ASSERT_FALSE(kb_ctrl_reg_usable(reg, 2));
    CU_ASSERT_TRUE(kb_ctrl_reg_usable(reg, 3));
    kb_ctrl_reg_free(reg);
}

int main(void)
{
    CU_pSuite s;
    unsigned failed;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("ctrl registry", NULL, NULL);
    CU_add_test(s, "register, fenced until caught up", test_register_unfence);
    CU_add_test(s, "session expiry, duplicate and replacing registrations",
                test_expire_and_replace);
    CU_add_test(s, "WantFence, WantShutDown, listing", test_fence_shutdown_list);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
