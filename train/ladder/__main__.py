from train.ladder.run import main

main()
