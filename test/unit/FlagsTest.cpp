//===- FlagsTest.cpp - the flag table and what is derived from it ---------===//
#include "stretto/Runtime/Flags.h"
#include "stretto/Runtime/Launcher.h"
#include "stretto/Runtime/RunSettings.h"

#include <gtest/gtest.h>

using namespace stretto;

namespace {

TEST(Flags, EveryRowIsReadBySomeone) {
  for (const FlagSpec &f : flagTable()) {
    SCOPED_TRACE(f.name);
    EXPECT_TRUE(f.toRun || f.toLaunch || f.compileDefault) << "a flag nobody reads";
    EXPECT_EQ(findFlag(f.name), &f);
    // The launcher's own flags never reach a rank; the compile-only ones
    // never reach the launcher or a rank.
    if (f.goesTo == FlagSpec::Launcher)
      EXPECT_TRUE(f.toLaunch && !f.toRun);
    if (f.compileDefault)
      EXPECT_TRUE(!f.toRun && !f.toLaunch && f.goesTo == FlagSpec::Compile);
  }
  EXPECT_EQ(findFlag("--no-such-flag"), nullptr);
}

TEST(Flags, EachSettingAFlagOverridesIsAPlanSetting) {
  const std::map<std::string, std::string> meta = RunSettings().toMeta();
  int overriding = 0;
  for (const FlagSpec &f : flagTable())
    if (f.setting) {
      ++overriding;
      EXPECT_TRUE(meta.count(f.setting))
          << f.name << " overrides '" << f.setting << "', which a plan file does not hold";
      // Overriding a plan setting means the compile must see the flag.
      EXPECT_NE(f.goesTo, FlagSpec::Ranks) << f.name;
    }
  EXPECT_GE(overriding, 3);
}

TEST(Flags, HelpListsEveryRunAndLaunchFlag) {
  const std::string help = runFlagsHelp();
  for (const FlagSpec &f : flagTable()) {
    if (f.compileDefault) // stretto-train's llvm::cl options list those
      continue;
    std::string head = std::string("  ") + f.name + (f.value ? std::string(" ") + f.value : "");
    EXPECT_NE(help.find(head), std::string::npos) << head;
  }
}

TEST(Flags, RunAndLauncherTakeTheirOwnAndShareTimeout) {
  std::vector<std::string> args = {"model.toml", "--nproc", "2", "--steps=5",   "--timeout",
                                   "7",          "--out",   "d", "--log-dir=L", "--on-peer-failure",
                                   "continue",   "x=1"};
  LaunchOptions launch;
  std::vector<std::string> rest = takeLaunchFlags(args, launch);
  EXPECT_EQ(launch.nproc, 2);
  EXPECT_EQ(launch.logDir, "L");
  EXPECT_EQ(launch.timeout, std::chrono::seconds(7));
  EXPECT_TRUE(launch.continueOnFailure && launch.onPeerFailureGiven);
  EXPECT_EQ(rest, (std::vector<std::string>{"model.toml", "--steps=5", "--timeout=7", "--out", "d",
                                            "--on-peer-failure=continue", "x=1"}));
  RunFlags run;
  rest = takeRunFlags(rest, run);
  EXPECT_EQ(run.steps, 5);
  EXPECT_EQ(run.timeoutSeconds, 7);
  EXPECT_EQ(run.outDir, "d");
  EXPECT_EQ(run.onPeerFailure, "continue");
  EXPECT_EQ(rest, (std::vector<std::string>{"model.toml", "x=1"}));
}

TEST(Flags, BadValuesNameTheFlag) {
  RunFlags run;
  LaunchOptions launch;
  auto message = [&](std::vector<std::string> args, bool launcher) -> std::string {
    try {
      if (launcher)
        takeLaunchFlags(args, launch);
      else
        takeRunFlags(args, run);
    } catch (const std::exception &e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message({"--steps", "0"}, false), "--steps must be at least 1, got 0");
  EXPECT_EQ(message({"--seed", "x"}, false), "--seed expects an integer, got 'x'");
  EXPECT_EQ(message({"--out"}, false), "--out needs a value");
  EXPECT_EQ(message({"--device", "tpu"}, false), "--device must be cpu, cuda or auto, got 'tpu'");
  EXPECT_EQ(message({"--nproc", "0"}, true), "--nproc must be in [1, 4096], got 0");
  EXPECT_EQ(message({"--nnodes", "2", "--node-rank", "2"}, true),
            "--node-rank 2 is outside --nnodes 2");
  // A switch given a value is not the switch: left to the caller.
  RunFlags f;
  EXPECT_EQ(takeRunFlags({"--resume=1"}, f), std::vector<std::string>{"--resume=1"});
  EXPECT_FALSE(f.resume);
}

} // namespace
